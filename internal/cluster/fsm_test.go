package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/slipstream-io/slipstream/internal/object"
	"github.com/slipstream-io/slipstream/internal/testnet"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

func bucket(name string) *BucketProps {
	b := BucketProps{Name: name, Created: t0}.WithDefaults()
	return &b
}

func TestApplyCommand(t *testing.T) {
	base := NewMap()
	base.Version = 7
	base.Nodes["n1"] = NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateUp, Voter: true, Joined: t0}
	base.Buckets["old"] = *bucket("old")
	base.Volumes["v1"] = VolumeSpec{Name: "v1", Size: 1 << 20, ChunkSize: 1 << 16, Copies: 1, Created: t0, ID: "7f"}

	n2 := NodeInfo{ID: "n2", RaftAddr: "127.0.0.1:3", IntraAddrs: []string{"127.0.0.1:4"}, State: StateUp, Joined: t0}
	n1Moved := base.Nodes["n1"].Clone()
	n1Moved.IntraAddrs = []string{"127.0.0.1:9"}
	updated := *bucket("old")
	updated.Copies = 3
	updated.Created = t0.Add(time.Hour) // ignored: creation time is kept
	bigger := base.Volumes["v1"]
	bigger.Size *= 2
	bigger.Created = time.Time{}

	tests := []struct {
		name    string
		cmd     command
		wantErr error
		changed bool
		check   func(t *testing.T, m *Map)
	}{
		{"create bucket", command{Op: opBucketCreate, Bucket: bucket("new")}, nil, true,
			func(t *testing.T, m *Map) {
				if _, ok := m.Bucket("new"); !ok {
					t.Error("bucket missing")
				}
			}},
		{"create existing", command{Op: opBucketCreate, Bucket: &BucketProps{Name: "old", Created: t0.Add(time.Second), Copies: 1, Mode: ModeLocal, Validate: "never"}}, object.ErrBucketExists, false, nil},
		{"create retried", command{Op: opBucketCreate, Bucket: bucket("old")}, nil, false, nil},
		{"create without props", command{Op: opBucketCreate}, ErrInvalid, false, nil},
		{"update bucket", command{Op: opBucketUpdate, Bucket: &updated}, nil, true,
			func(t *testing.T, m *Map) {
				b := m.Buckets["old"]
				if b.Copies != 3 || !b.Created.Equal(t0) {
					t.Errorf("updated bucket %+v", b)
				}
			}},
		{"update same", command{Op: opBucketUpdate, Bucket: bucket("old")}, nil, false, nil},
		{"update missing", command{Op: opBucketUpdate, Bucket: bucket("nope")}, object.ErrBucketNotFound, false, nil},
		{"delete bucket", command{Op: opBucketDelete, Name: "old"}, nil, true,
			func(t *testing.T, m *Map) {
				if _, ok := m.Bucket("old"); ok {
					t.Error("bucket still there")
				}
			}},
		{"delete missing bucket", command{Op: opBucketDelete, Name: "nope"}, object.ErrBucketNotFound, false, nil},
		{"add node", command{Op: opNodePut, Node: &n2}, nil, true,
			func(t *testing.T, m *Map) {
				if got := m.UpNodeIDs(); !reflect.DeepEqual(got, []string{"n1", "n2"}) {
					t.Errorf("up nodes %v", got)
				}
			}},
		{"node unchanged", command{Op: opNodePut, Node: ptr(base.Nodes["n1"].Clone())}, nil, false, nil},
		{"node moved", command{Op: opNodePut, Node: &n1Moved}, nil, true,
			func(t *testing.T, m *Map) {
				if got := m.Nodes["n1"].IntraAddrs; !reflect.DeepEqual(got, []string{"127.0.0.1:9"}) {
					t.Errorf("addrs %v", got)
				}
			}},
		{"node without id", command{Op: opNodePut, Node: &NodeInfo{}}, ErrInvalid, false, nil},
		{"node down", command{Op: opNodeState, Name: "n1", State: StateDown}, nil, true,
			func(t *testing.T, m *Map) {
				if len(m.UpNodeIDs()) != 0 {
					t.Errorf("up nodes %v", m.UpNodeIDs())
				}
				if d := m.Nodes["n1"].Downs; d != 1 {
					t.Errorf("downs %d, want 1", d)
				}
			}},
		{"node same state", command{Op: opNodeState, Name: "n1", State: StateUp}, nil, false, nil},
		{"node bad state", command{Op: opNodeState, Name: "n1", State: "sleepy"}, ErrInvalid, false, nil},
		{"state of missing node", command{Op: opNodeState, Name: "n9", State: StateDown}, ErrNodeNotFound, false, nil},
		{"remove node", command{Op: opNodeRemove, Name: "n1"}, nil, true,
			func(t *testing.T, m *Map) {
				if len(m.Nodes) != 0 {
					t.Errorf("nodes %v", m.Nodes)
				}
			}},
		{"remove missing node", command{Op: opNodeRemove, Name: "n9"}, nil, false, nil},
		{"resize volume", command{Op: opVolumePut, Volume: &bigger}, nil, true,
			func(t *testing.T, m *Map) {
				v := m.Volumes["v1"]
				if v.Size != 2<<20 || !v.Created.Equal(t0) || v.ID != "7f" {
					t.Errorf("volume %+v", v)
				}
			}},
		{"volume unchanged", command{Op: opVolumePut, Volume: ptr(base.Volumes["v1"])}, nil, false, nil},
		{"delete volume", command{Op: opVolumeDelete, Name: "v1"}, nil, true,
			func(t *testing.T, m *Map) {
				if _, ok := m.Volumes["v1"]; ok || !slices.Equal(m.DeletedVolumes, []string{"v1@7f"}) {
					t.Errorf("volumes %v, deleted %v", m.Volumes, m.DeletedVolumes)
				}
			}},
		{"delete missing volume", command{Op: opVolumeDelete, Name: "v9"}, ErrVolumeNotFound, false, nil},
		{"mirror stale", command{Op: opVolumeStale, Name: "v1", Node: &NodeInfo{ID: "n2"}, State: StateDown}, nil, true,
			func(t *testing.T, m *Map) {
				if got := m.Volumes["v1"].Stale; !slices.Equal(got, []string{"n2"}) {
					t.Errorf("stale %v", got)
				}
			}},
		{"mirror in sync already", command{Op: opVolumeStale, Name: "v1", Node: &NodeInfo{ID: "n2"}, State: StateUp}, nil, false, nil},
		{"stale of a missing volume", command{Op: opVolumeStale, Name: "v9", Node: &NodeInfo{ID: "n2"}, State: StateDown}, ErrVolumeNotFound, false, nil},
		{"stale without a node", command{Op: opVolumeStale, Name: "v1", State: StateDown}, ErrInvalid, false, nil},
		{"unknown op", command{Op: "explode"}, ErrInvalid, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := json.Marshal(base)
			got, err := applyCommand(base, tt.cmd)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if changed := got != base; changed != tt.changed {
				t.Fatalf("changed = %v, want %v", changed, tt.changed)
			}
			wantVersion := base.Version
			if tt.changed {
				wantVersion++
			}
			if got.Version != wantVersion {
				t.Errorf("version %d, want %d", got.Version, wantVersion)
			}
			after, _ := json.Marshal(base)
			if !bytes.Equal(before, after) {
				t.Error("applyCommand modified the published map")
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestDownsCount: the count of times a node was marked down grows with each
// down mark, and a node announcing itself again (with a zero count) keeps it.
func TestDownsCount(t *testing.T) {
	m := NewMap()
	n := NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateUp, Joined: t0}
	steps := []struct {
		cmd   command
		downs uint64
		state NodeState
	}{
		{command{Op: opNodePut, Node: &n}, 0, StateUp},
		{command{Op: opNodeState, Name: "n1", State: StateDown}, 1, StateDown},
		{command{Op: opNodeState, Name: "n1", State: StateDown}, 1, StateDown},
		{command{Op: opNodePut, Node: &n}, 1, StateUp}, // re-announced after a restart
		{command{Op: opNodeState, Name: "n1", State: StateDown}, 2, StateDown},
		{command{Op: opNodeState, Name: "n1", State: StateUp}, 2, StateUp},
	}
	for i, st := range steps {
		var err error
		if m, err = applyCommand(m, st.cmd); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := m.Nodes["n1"]; got.Downs != st.downs || got.State != st.state {
			t.Fatalf("step %d: %s with downs %d, want %s with %d", i, got.State, got.Downs, st.state, st.downs)
		}
	}
}

// TestStateSince: a node's StateSince is the time of the command that gave
// it its state; a command that leaves the state as it is (a repeated mark,
// a re-announcement of an up node) keeps it.
func TestStateSince(t *testing.T) {
	m := NewMap()
	n := NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateUp, Joined: t0}
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	steps := []struct {
		cmd   command
		since time.Time
	}{
		{command{Op: opNodePut, Node: &n, At: at(1)}, at(1)},
		{command{Op: opNodePut, Node: &n, At: at(2)}, at(1)}, // re-announced, still up
		{command{Op: opNodeState, Name: "n1", State: StateDown, At: at(3)}, at(3)},
		{command{Op: opNodeState, Name: "n1", State: StateDown, At: at(4)}, at(3)},
		{command{Op: opNodePut, Node: &n, At: at(5)}, at(5)}, // back up after a restart
		{command{Op: opNodeState, Name: "n1", State: StateDown, From: StateUp, At: at(6)}, at(6)},
		{command{Op: opNodeState, Name: "n1", State: StateUp}, time.Time{}}, // an older log entry
	}
	for i, st := range steps {
		var err error
		if m, err = applyCommand(m, st.cmd); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := m.Nodes["n1"].StateSince; !got.Equal(st.since) {
			t.Fatalf("step %d: StateSince %v, want %v", i, got, st.since)
		}
	}
}

// TestDrain: a drain takes the node out of placement while it stays up,
// survives a re-announcement and a health mark, and is undone by undrain.
func TestDrain(t *testing.T) {
	m := NewMap()
	n := NodeInfo{ID: "n1", RaftAddr: "127.0.0.1:1", IntraAddrs: []string{"127.0.0.1:2"}, State: StateUp, Joined: t0}
	steps := []struct {
		cmd      command
		draining bool
		places   bool
		drains   uint64
	}{
		{command{Op: opNodePut, Node: &n}, false, true, 0},
		{command{Op: opNodeDrain, Name: "n1", Drain: true}, true, false, 1},
		{command{Op: opNodeDrain, Name: "n1", Drain: true}, true, false, 1}, // already draining
		{command{Op: opNodePut, Node: &n}, true, false, 1},                  // re-announced after a restart
		{command{Op: opNodeState, Name: "n1", State: StateDown}, true, false, 1},
		{command{Op: opNodeState, Name: "n1", State: StateUp}, true, false, 1},
		{command{Op: opNodeDrain, Name: "n1", Drain: false}, false, true, 2},
	}
	for i, st := range steps {
		var err error
		if m, err = applyCommand(m, st.cmd); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := m.Nodes["n1"]; got.Draining != st.draining || got.Places() != st.places || got.Drains != st.drains {
			t.Fatalf("step %d: draining %v, places %v, drains %d; want %v, %v, %d", i, got.Draining, got.Places(), got.Drains, st.draining, st.places, st.drains)
		}
	}
	if _, err := applyCommand(m, command{Op: opNodeDrain, Name: "nope", Drain: true}); !errors.Is(err, ErrNodeNotFound) {
		t.Fatalf("drain of an unknown node: %v", err)
	}
}

func TestFSMApplySnapshotRestore(t *testing.T) {
	f := &fsm{pub: newPublisher()}
	cmds := []command{
		{Op: opNodePut, Node: &NodeInfo{ID: "n1", RaftAddr: "a", IntraAddrs: []string{"b"}, State: StateUp, Joined: t0}},
		{Op: opBucketCreate, Bucket: bucket("one")},
		{Op: opBucketCreate, Bucket: bucket("two")},
		{Op: opBucketCreate, Bucket: &BucketProps{Name: "one", Created: t0.Add(1), Copies: 1, Mode: ModeLocal, Validate: "never"}}, // conflict
		{Op: opVolumePut, Volume: &VolumeSpec{Name: "vol", Size: 10, ChunkSize: 4096, Copies: 1, Created: t0}},
	}
	for i, c := range cmds {
		data, _ := json.Marshal(c)
		res := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data})
		if i == 3 {
			if err, _ := res.(error); !errors.Is(err, object.ErrBucketExists) {
				t.Errorf("conflicting create returned %v", res)
			}
		} else if res != nil {
			t.Errorf("command %d returned %v", i, res)
		}
	}
	if res := f.Apply(&raft.Log{Type: raft.LogCommand, Data: []byte("{not json")}); res == nil {
		t.Error("garbage command accepted")
	}
	m := f.pub.current()
	if m.Version != 4 {
		t.Errorf("version %d, want 4", m.Version)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := &fsm{pub: newPublisher()}
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if got := g.pub.current(); !reflect.DeepEqual(got, m) {
		t.Errorf("restored map differs:\n%+v\n%+v", got, m)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte("[1,2")))); err == nil {
		t.Error("restore of garbage succeeded")
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

func TestPublishNeverBlocks(t *testing.T) {
	p := newPublisher()
	_, ch := p.snapshot()
	done := make(chan struct{})
	go func() {
		for i := range 1000 {
			m := p.current().Clone()
			m.Version = uint64(i + 1)
			p.publish(m)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publish blocked with no reader")
	}
	select {
	case <-ch:
	default:
		t.Error("old change channel not closed")
	}
	if p.current().Version != 1000 {
		t.Errorf("version %d", p.current().Version)
	}
}

func TestBucketPropsCheck(t *testing.T) {
	tests := []struct {
		name string
		b    BucketProps
		want error
	}{
		{"defaults", BucketProps{Name: "abc"}, nil},
		{"bad name", BucketProps{Name: "A"}, object.ErrInvalidBucketName},
		{"copies", BucketProps{Name: "abc", Copies: -1}, object.ErrInvalidArgument},
		{"mode", BucketProps{Name: "abc", Mode: "fast"}, object.ErrInvalidArgument},
		{"cache without backend", BucketProps{Name: "abc", Mode: ModeCache}, object.ErrInvalidArgument},
		{"s3 without bucket", BucketProps{Name: "abc", Mode: ModeCache, Backend: BackendSpec{Kind: BackendS3}}, object.ErrInvalidArgument},
		{"s3", BucketProps{Name: "abc", Mode: ModeCache, Backend: BackendSpec{Kind: BackendS3, Bucket: "remote"}}, nil},
		{"fs without path", BucketProps{Name: "abc", Mode: ModeWriteback, Backend: BackendSpec{Kind: BackendFS}}, object.ErrInvalidArgument},
		{"fs", BucketProps{Name: "abc", Mode: ModeWriteback, Backend: BackendSpec{Kind: BackendFS, Path: "/x"}}, nil},
		{"ttl", BucketProps{Name: "abc", Validate: "ttl:5m"}, nil},
		{"bad ttl", BucketProps{Name: "abc", Validate: "ttl:-5m"}, object.ErrInvalidArgument},
		{"bad validate", BucketProps{Name: "abc", Validate: "sometimes"}, object.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.WithDefaults().Check()
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("Check() = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVolumeSpecCheck(t *testing.T) {
	tests := []struct {
		v  VolumeSpec
		ok bool
	}{
		{VolumeSpec{Name: "vol-1", Size: 1 << 30}, true},
		{VolumeSpec{Name: "", Size: 1}, false},
		{VolumeSpec{Name: "Vol", Size: 1}, false},
		{VolumeSpec{Name: "v", Size: 0}, false},
		{VolumeSpec{Name: "v", Size: 1, ChunkSize: 5000}, false},
		{VolumeSpec{Name: "v", Size: 1, ChunkSize: 2048}, false},
		{VolumeSpec{Name: "v", Size: 1, Copies: 17}, false},
		{VolumeSpec{Name: "v", Size: 1, ID: "0123456789abcdef"}, true},
		{VolumeSpec{Name: "v", Size: 1, ID: "../x"}, false},
		{VolumeSpec{Name: "v", Size: 1, ID: "ABC"}, false},
	}
	for _, tt := range tests {
		err := tt.v.WithDefaults().Check()
		if (err == nil) != tt.ok {
			t.Errorf("%+v: Check() = %v", tt.v, err)
		}
		if err != nil && !errors.Is(err, object.ErrInvalidArgument) {
			t.Errorf("%+v: error %v does not wrap ErrInvalidArgument", tt.v, err)
		}
	}
}

func TestParseValidate(t *testing.T) {
	tests := []struct {
		in     string
		policy ValidatePolicy
		ttl    time.Duration
		ok     bool
	}{
		{"", ValidateNever, 0, true},
		{"never", ValidateNever, 0, true},
		{"always", ValidateAlways, 0, true},
		{"ttl:30s", ValidateTTL, 30 * time.Second, true},
		{"ttl:1h30m", ValidateTTL, 90 * time.Minute, true},
		{"ttl:", "", 0, false},
		{"ttl:0s", "", 0, false},
		{"ttl", ValidateTTL, 0, true}, // each node's tier.ttl
		{"Always", "", 0, false},
	}
	for _, tt := range tests {
		p, d, err := ParseValidate(tt.in)
		if (err == nil) != tt.ok || p != tt.policy || d != tt.ttl {
			t.Errorf("ParseValidate(%q) = %q, %v, %v", tt.in, p, d, err)
		}
	}
}

func FuzzParseValidate(f *testing.F) {
	for _, s := range []string{"", "never", "always", "ttl:30s", "ttl:-1s", "ttl:1h2m3s4ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, d, err := ParseValidate(s)
		if err != nil {
			if !errors.Is(err, object.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
			return
		}
		if p == ValidateTTL && s == "ttl" {
			if d != 0 {
				t.Fatalf("bare ttl parsed as %v", d)
			}
		} else if p == ValidateTTL {
			if d <= 0 {
				t.Fatalf("ttl %v accepted", d)
			}
			// Round trip through the canonical form.
			p2, d2, err := ParseValidate("ttl:" + d.String())
			if err != nil || p2 != p || d2 != d {
				t.Fatalf("round trip of %q: %q %v %v", s, p2, d2, err)
			}
		} else if d != 0 {
			t.Fatalf("%q: ttl %v for policy %q", s, d, p)
		}
	})
}

// FuzzDecodeCommand feeds arbitrary log entries to the state machine: it
// must never panic, and a rejected entry must leave the map untouched.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []command{
		{Op: opBucketCreate, Bucket: bucket("abc")},
		{Op: opNodePut, Node: &NodeInfo{ID: "n1"}},
		{Op: opNodeState, Name: "n1", State: StateDown},
		{Op: opVolumeDelete, Name: "v"},
	} {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fm := &fsm{pub: newPublisher()}
		before := fm.pub.current()
		res := fm.Apply(&raft.Log{Type: raft.LogCommand, Data: data})
		after := fm.pub.current()
		if _, isErr := res.(error); isErr && after != before {
			t.Fatal("failed command changed the map")
		}
		if after != before && after.Version != before.Version+1 {
			t.Fatalf("version %d after %d", after.Version, before.Version)
		}
		if _, err := json.Marshal(after); err != nil {
			t.Fatalf("map not serialisable: %v", err)
		}
	})
}

func TestMapJSONRoundTrip(t *testing.T) {
	m := NewMap()
	m.Version = 42
	m.Nodes["n1"] = NodeInfo{ID: "n1", PublicAddrs: []string{"127.0.0.1:9000", "127.0.0.2:9000"}, IntraAddrs: []string{"https://127.0.0.1:9201"}, RaftAddr: "127.0.0.1:9301", Mountpaths: []string{"/d1", "/d2"}, State: StateMaintenance, Voter: true, Joined: t0}
	m.Buckets["abc"] = BucketProps{Name: "abc", Created: t0, Copies: 2, Mode: ModeCache, Backend: BackendSpec{Kind: BackendS3, Endpoint: "http://x", Bucket: "r", PathStyle: true}, Validate: "ttl:1m"}
	m.Volumes["v"] = VolumeSpec{Name: "v", Size: 1, ChunkSize: 4096, Copies: 1, Created: t0}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := NewMap()
	if err := json.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n%+v\n%+v", got, m)
	}
	if urls := got.Nodes["n1"].IntraURLs(); !reflect.DeepEqual(urls, []string{"https://127.0.0.1:9201"}) {
		t.Errorf("IntraURLs %v", urls)
	}
	if BaseURL("127.0.0.1:1/") != "http://127.0.0.1:1" {
		t.Errorf("BaseURL %q", BaseURL("127.0.0.1:1/"))
	}
	c := m.Clone()
	c.Nodes["n1"].Mountpaths[0] = "/changed"
	if m.Nodes["n1"].Mountpaths[0] != "/d1" {
		t.Error("Clone shares slices")
	}
}

func TestVolumeStaleMarks(t *testing.T) {
	m := NewMap()
	m.Volumes["v"] = VolumeSpec{Name: "v", Size: 1 << 20, ChunkSize: 4096, Copies: 2}
	var err error
	for _, step := range []struct {
		node  string
		state NodeState
		want  []string
	}{
		{"c", StateDown, []string{"c"}},
		{"a", StateDown, []string{"a", "c"}},
		{"c", StateUp, []string{"a"}},
		{"a", StateUp, nil},
	} {
		before := slices.Clone(m.Volumes["v"].Stale)
		prev := m
		if m, err = applyCommand(m, command{Op: opVolumeStale, Name: "v", Node: &NodeInfo{ID: step.node}, State: step.state}); err != nil {
			t.Fatal(err)
		}
		if got := m.Volumes["v"].Stale; !slices.Equal(got, step.want) {
			t.Fatalf("%s %s: stale %v, want %v", step.node, step.state, got, step.want)
		}
		if !slices.Equal(prev.Volumes["v"].Stale, before) {
			t.Fatal("applyCommand changed the previous map's stale list")
		}
	}
	// Marks are per writer: a mirror stays stale until every writer whose
	// writes it missed has cleared its own mark; "" clears them all.
	for _, step := range []struct {
		mirror, writer string
		state          NodeState
		want           map[string][]string
	}{
		{"c", "x", StateDown, map[string][]string{"c": {"x"}}},
		{"c", "y", StateDown, map[string][]string{"c": {"x", "y"}}},
		{"a", "y", StateDown, map[string][]string{"a": {"y"}, "c": {"x", "y"}}},
		{"c", "x", StateUp, map[string][]string{"a": {"y"}, "c": {"y"}}},
		{"c", "x", StateUp, map[string][]string{"a": {"y"}, "c": {"y"}}},
		{"a", "x", StateDown, map[string][]string{"a": {"x", "y"}, "c": {"y"}}},
		{"a", "", StateUp, map[string][]string{"c": {"y"}}},
		{"c", "y", StateUp, nil},
	} {
		if m, err = applyCommand(m, command{Op: opVolumeStale, Name: "v", Node: &NodeInfo{ID: step.mirror}, State: step.state, Writer: step.writer}); err != nil {
			t.Fatal(err)
		}
		v := m.Volumes["v"]
		if !maps.EqualFunc(v.StaleBy, step.want, slices.Equal) || !slices.Equal(v.Stale, slices.Sorted(maps.Keys(step.want))) {
			t.Fatalf("%s by %s %s: stale %v by %v, want %v", step.mirror, step.writer, step.state, v.Stale, v.StaleBy, step.want)
		}
	}
	// A resize keeps the marks.
	m, _ = applyCommand(m, command{Op: opVolumeStale, Name: "v", Node: &NodeInfo{ID: "b"}, State: StateDown})
	bigger := m.Volumes["v"]
	bigger.Size, bigger.Stale = 2<<20, nil
	if m, err = applyCommand(m, command{Op: opVolumePut, Volume: &bigger}); err != nil || !slices.Equal(m.Volumes["v"].Stale, []string{"b"}) {
		t.Fatalf("resize: %v, stale %v", err, m.Volumes["v"].Stale)
	}
}

// refusesAll holds only when every address refuses connections.
func TestRefusesAll(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gone := testnet.RefusingAddr(t, "127.0.0.1")
	ctx := context.Background()
	for _, tc := range []struct {
		addrs []string
		want  bool
	}{
		{[]string{gone}, true},
		{[]string{"http://" + gone}, true},
		{[]string{gone, ln.Addr().String()}, false},
		{[]string{ln.Addr().String()}, false},
		{nil, false},
	} {
		if got := refusesAll(ctx, tc.addrs); got != tc.want {
			t.Errorf("refusesAll(%v) = %v, want %v", tc.addrs, got, tc.want)
		}
	}
}
