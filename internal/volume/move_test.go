package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slipstream-io/slipstream/internal/placement"
)

// TestReplaceCopiesToNewcomers: b is taken out of a copies=2 volume's
// node set {a, b, c}. Every node with the volume open goes on reading
// the data from the owners that hold it, never from a newcomer that has
// no copy yet (c prefers its own mirror, which would read zeros); the
// writer copies the chunks to their newcomers, also while it writes, and
// then ends the re-placement. With a down afterwards, c serves every
// chunk alone.
func TestReplaceCopiesToNewcomers(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c")
	const chunks = 64
	open := func(self string, prev []string, nodes []string, placed func(context.Context, []string, uint64, []int64) error) *Volume {
		cfg := memConfig(self, t.TempDir(), chunks*memCS, nodes, reps, nil)
		cfg.Spec.Copies = 2
		cfg.Prev, cfg.Placed = prev, placed
		return openMemConfig(t, cfg)
	}
	all := []string{"a", "b", "c"}
	var mu sync.Mutex
	var placedFor [][]string
	wa := open("a", nil, all, func(_ context.Context, nodes []string, _ uint64, _ []int64) error {
		mu.Lock()
		defer mu.Unlock()
		placedFor = append(placedFor, slices.Clone(nodes))
		return nil
	})
	wc := open("c", nil, all, nil)

	want := make([]byte, chunks*memCS)
	for i := range want {
		want[i] = byte(i/memCS) + 1
	}
	if err := wa.WriteAt(ctx, want, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for c := int64(0); c < chunks; c++ {
		if slices.Contains(wa.Owners(c), "b") {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no chunk on b")
	}
	check := func(v *Volume, what string) {
		t.Helper()
		got := make([]byte, len(want))
		if err := v.ReadAt(ctx, got, 0); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for c := range chunks {
			if !bytes.Equal(got[c*memCS:(c+1)*memCS], want[c*memCS:(c+1)*memCS]) {
				t.Fatalf("%s: chunk %d reads %d, want %d", what, c, got[c*memCS], want[c*memCS])
			}
		}
	}

	reps["b"].down.Store(true) // b died, and is removed
	wc.NoteGone([]string{"b"})
	wc.NotePlacement([]string{"a", "c"}, all, false)
	check(wc, "c, before the writer copied anything")
	if !wc.Moving() {
		t.Fatal("c does not know of the re-placement")
	}
	for c := int64(0); c < chunks; c++ {
		if o := wc.Owners(c); len(o) != 2 || slices.Contains(o, "b") {
			t.Fatalf("chunk %d owners %v after b left", c, o)
		}
	}

	if n := wc.CopiesLeft(); n != 0 {
		t.Fatalf("c, not the writer, counts %d copies left", n)
	}
	// The writer copies while it writes.
	wa.NoteGone([]string{"b"})
	wa.NotePlacement([]string{"a", "c"}, all, false)
	for c := int64(0); c < chunks; c += 3 {
		p := bytes.Repeat([]byte{byte(100 + c)}, memCS/2)
		if err := wa.WriteAt(ctx, p, c*memCS+memCS/4, false); err != nil {
			t.Fatal(err)
		}
		copy(want[c*memCS+memCS/4:], p)
	}
	// The writer records the end in the map (Placed), then marks it done
	// here: wait for both.
	waitUntil(t, "the writer to end the re-placement", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(placedFor) > 0 && !wa.Moving()
	})
	if !slices.Equal(placedFor[0], []string{"a", "c"}) || wa.CopiesLeft() != 0 {
		t.Fatalf("placed for %v, moving %v", placedFor, wa.Moving())
	}
	check(wc, "c, while its map still shows the re-placement")
	check(wa, "a")

	// The map shows it ended; then a goes down.
	wc.NotePlacement([]string{"a", "c"}, nil, false)
	wa.NotePlacement([]string{"a", "c"}, nil, false)
	if err := wa.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	reps["a"].down.Store(true)
	check(wc, "c alone")
	if n := wc.StaleChunks()["b"]; n != 0 {
		t.Fatalf("c counts %d stale chunks of b", n)
	}
}

// TestReplaceOpenMidway: a volume opened while a re-placement is in
// progress (Config.Prev) avoids the newcomers, and a writer opened so
// copies to them; chunks grown meanwhile are copied too.
func TestReplaceOpenMidway(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c", "d")
	all := []string{"a", "b", "c", "d"}
	const chunks = 32
	cfgFor := func(self string, prev, nodes []string) Config {
		cfg := memConfig(self, t.TempDir(), chunks*memCS, nodes, reps, nil)
		cfg.Spec.Copies = 2
		cfg.Prev = prev
		return cfg
	}
	w := openMemConfig(t, cfgFor("a", nil, all))
	want := bytes.Repeat([]byte("0123456789abcdef"), chunks*memCS/16)
	if err := w.WriteAt(ctx, want, 0, true); err != nil {
		t.Fatal(err)
	}
	w.Close()
	reps["d"].down.Store(true)

	var placed []string
	cfg := cfgFor("a", all, []string{"a", "b", "c"})
	cfg.Placed = func(_ context.Context, nodes []string, _ uint64, _ []int64) error { placed = nodes; return nil }
	r := openMemConfig(t, cfgFor("b", all, []string{"a", "b", "c"}))
	got := make([]byte, len(want))
	if err := r.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reader opened midway: %v, equal %v", err, bytes.Equal(got, want))
	}
	w = openMemConfig(t, cfg)
	if err := w.Grow(2 * chunks * memCS); err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte{7}, chunks*memCS)
	if err := w.WriteAt(ctx, more, chunks*memCS, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the re-placement to end", func() bool { return !w.Moving() })
	if !slices.Equal(placed, []string{"a", "b", "c"}) {
		t.Fatalf("placed for %v", placed)
	}
	want = append(want, more...)
	for _, down := range []string{"a", "b", "c"} {
		reps[down].down.Store(true)
		got := make([]byte, len(want))
		if err := w.ReadAt(ctx, got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("with %s down: %v, equal %v", down, err, bytes.Equal(got, want))
		}
		reps[down].down.Store(false)
		w.NotePlacement([]string{"a", "b", "c"}, nil, false)
		// Back, it is stale for the chunks with unsynced writes (it may
		// have lost them) until they are copied again.
		waitUntil(t, fmt.Sprintf("%s back in sync", down), func() bool { return len(w.Down()) == 0 && len(w.StaleChunks()) == 0 })
	}
}

// TestReplaceSkipsGoneNewcomers: the chunks a re-placement in progress
// would copy to a node gone from the cluster meanwhile (NoteGone) are not
// copied or waited for: its own re-placement follows.
func TestReplaceSkipsGoneNewcomers(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c", "d")
	all := []string{"a", "b", "c", "d"}
	const chunks = 64
	cfg := memConfig("a", t.TempDir(), chunks*memCS, all, reps, nil)
	cfg.Spec.Copies = 2
	placed := make(chan []string, 1)
	cfg.Placed = func(_ context.Context, nodes []string, _ uint64, _ []int64) error { placed <- nodes; return nil }
	w := openMemConfig(t, cfg)
	if err := w.WriteAt(ctx, bytes.Repeat([]byte{9}, chunks*memCS), 0, true); err != nil {
		t.Fatal(err)
	}
	reps["b"].down.Store(true)
	w.NoteGone([]string{"b", "d"})
	w.NotePlacement([]string{"a", "c", "d"}, all, false)
	select {
	case nodes := <-placed:
		if !slices.Equal(nodes, []string{"a", "c", "d"}) {
			t.Fatalf("placed for %v", nodes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the re-placement did not end")
	}
	got := make([]byte, memCS)
	skipped := 0
	for c := int64(0); c < chunks; c++ {
		if o := w.Owners(c); !slices.Contains(o, "d") || slices.Contains(placementOwners(all, c), "d") {
			continue
		}
		skipped++
		if err := reps["d"].ReadAt(ctx, "vol@1", c, got, 0); err != nil || got[0] != 0 {
			t.Fatalf("chunk %d was copied to d, which is gone: %v %d", c, err, got[0])
		}
	}
	if skipped == 0 {
		t.Fatal("d is the newcomer of no chunk")
	}
}

// placementOwners is the owners of chunk c of the test volume over nodes.
func placementOwners(nodes []string, c int64) []string {
	return placement.Owners(nodes, ChunkName("vol", c), 2)
}

// TestReplaceOrphansLostChunks: b and c of a copies=2 volume on
// {a, b, c, d} die, c is removed while b's re-placement is in progress
// (it stays in the set), and d missed a write to a chunk it shares with
// b. The chunks whose copies were all on b and c, and d's chunk, have no
// copy left to copy from: the re-placement gives their newcomers empty
// copies, ends, and reports them lost (Placed). Their reads and writes
// fail with ErrChunkLost while the map lists them, and every other chunk
// reads back; c's re-placement then ends with nothing more lost, and
// once the loss is accepted the lost chunks read as zeros on every owner.
func TestReplaceOrphansLostChunks(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c", "d")
	all := []string{"a", "b", "c", "d"}
	const chunks = 64
	cfg := memConfig("a", t.TempDir(), chunks*memCS, all, reps, nil)
	cfg.Spec.Copies = 2
	type placedAt struct {
		nodes []string
		lost  []int64
	}
	placed := make(chan placedAt, 2)
	cfg.Placed = func(_ context.Context, nodes []string, _ uint64, lost []int64) error {
		placed <- placedAt{nodes, lost}
		return nil
	}
	w := openMemConfig(t, cfg)
	want := make([]byte, chunks*memCS)
	for i := range want {
		want[i] = byte(i/memCS) + 1
	}
	if err := w.WriteAt(ctx, want, 0, true); err != nil {
		t.Fatal(err)
	}
	owners := func(nodes []string, c int64) []string { return placement.Owners(nodes, ChunkName("vol", c), 2) }
	var lost []int64 // what the re-placement should find lost
	k := int64(-1)   // d's stale chunk, shared with b
	for c := int64(0); c < chunks; c++ {
		switch o := owners(all, c); {
		case !slices.Contains(o, "a") && !slices.Contains(o, "d"):
			lost = append(lost, c)
		case k < 0 && slices.Contains(o, "b") && slices.Contains(o, "d"):
			k = c
			lost = append(lost, c)
		}
	}
	slices.Sort(lost)
	if k < 0 || len(lost) < 2 || len(lost) > chunks/2 {
		t.Fatalf("placement gives lost chunks %v, d's chunk %d: pick other node names", lost, k)
	}
	reps["d"].down.Store(true)
	if err := w.WriteAt(ctx, []byte{0xee}, k*memCS, true); err != nil {
		t.Fatal(err)
	}
	want[k*memCS] = 0xee
	reps["b"].down.Store(true)
	reps["c"].down.Store(true)
	reps["d"].down.Store(false)

	w.NoteGone([]string{"b", "c"})
	w.NotePlacement([]string{"a", "c", "d"}, all, false)
	var got placedAt
	select {
	case got = <-placed:
	case <-time.After(5 * time.Second):
		t.Fatal("b's re-placement did not end")
	}
	if !slices.Equal(got.nodes, []string{"a", "c", "d"}) || !slices.Equal(got.lost, lost) {
		t.Fatalf("placed for %v with lost %v, want lost %v", got.nodes, got.lost, lost)
	}
	check := func(what string, lostErr bool) {
		t.Helper()
		buf := make([]byte, memCS)
		for c := int64(0); c < chunks; c++ {
			err := w.ReadAt(ctx, buf, c*memCS)
			isLost := slices.Contains(lost, c)
			switch {
			case isLost && lostErr:
				if !errors.Is(err, ErrChunkLost) {
					t.Fatalf("%s: lost chunk %d reads: %v", what, c, err)
				}
				if err := w.WriteAt(ctx, []byte{1}, c*memCS, false); !errors.Is(err, ErrChunkLost) {
					t.Fatalf("%s: lost chunk %d writes: %v", what, c, err)
				}
			case isLost:
				if err != nil || !allZero(buf) {
					t.Fatalf("%s: accepted lost chunk %d: %v, zeros %v", what, c, err, allZero(buf))
				}
			case err != nil || !bytes.Equal(buf, want[c*memCS:(c+1)*memCS]):
				t.Fatalf("%s: chunk %d: %v, reads %d want %d", what, c, err, buf[0], want[c*memCS])
			}
		}
	}
	check("after b's re-placement", true)

	// The map: b's re-placement ended with the chunks lost, and c's
	// started.
	w.NoteLost(lost)
	w.NoteGone([]string{"c"})
	w.NotePlacement([]string{"a", "d"}, []string{"a", "c", "d"}, false)
	select {
	case got = <-placed:
	case <-time.After(5 * time.Second):
		t.Fatal("c's re-placement did not end")
	}
	if !slices.Equal(got.nodes, []string{"a", "d"}) || len(got.lost) != 0 {
		t.Fatalf("c's re-placement: placed for %v with lost %v, want none more", got.nodes, got.lost)
	}
	w.NotePlacement([]string{"a", "d"}, nil, false)
	check("after c's re-placement", true)
	waitUntil(t, "d back in sync", func() bool { return len(w.StaleChunks()) == 0 })

	w.NoteLost(nil) // accepted
	check("accepted", false)
	for _, down := range []string{"a", "d"} {
		reps[down].down.Store(true)
		check("accepted, with "+down+" down", false)
		reps[down].down.Store(false)
		waitUntil(t, down+" back", func() bool { return len(w.Down()) == 0 && len(w.StaleChunks()) == 0 })
	}
}

// TestDrainKeepsWritingDrained: b is drained out of a copies=1 volume's
// set {a, b, c}. Until the re-placement ends, b is written with the
// chunks' new owners and is their source; once the map records the copies
// made, readers read the new owners only; after the end, nothing reads or
// writes b. A drain that ends while the copies are made puts the set back,
// b current for every chunk it held.
func TestDrainKeepsWritingDrained(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c")
	all := []string{"a", "b", "c"}
	ac := []string{"a", "c"}
	const chunks = 48
	placed := make(chan []string, 4)
	cfg := memConfig("a", t.TempDir(), chunks*memCS, all, reps, nil)
	cfg.Spec.Copies = 1
	cfg.Placed = func(_ context.Context, nodes []string, _ uint64, _ []int64) error { placed <- nodes; return nil }
	w := openMemConfig(t, cfg)
	rcfg := memConfig("c", t.TempDir(), chunks*memCS, all, reps, nil)
	rcfg.Spec.Copies = 1
	r := openMemConfig(t, rcfg)
	p := newChunkPattern(t, w, chunks)
	want, write, check := p.want, p.write, p.check
	onB := func() (cs []int64) {
		for c := int64(0); c < chunks; c++ {
			if slices.Equal(placementOwners1(all, c), []string{"b"}) {
				cs = append(cs, c)
			}
		}
		return cs
	}()
	if len(onB) == 0 {
		t.Fatal("no chunk on b")
	}
	bHolds := func(what string) {
		t.Helper()
		got := make([]byte, memCS)
		for _, c := range onB {
			if err := reps["b"].ReadAt(ctx, "vol@1", c, got, 0); err != nil || !bytes.Equal(got, want[c*memCS:(c+1)*memCS]) {
				t.Fatalf("%s: b's copy of chunk %d: %v, reads %d want %d", what, c, err, got[0], want[c*memCS])
			}
		}
	}
	write(1)

	for _, v := range []*Volume{w, r} {
		v.NotePlacement(ac, all, false)
	}
	write(60) // while the copies are made
	check(r, "c, copying")
	select {
	case nodes := <-placed:
		if !slices.Equal(nodes, ac) {
			t.Fatalf("placed for %v", nodes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the re-placement did not end")
	}
	write(120) // copied, the map not told yet
	bHolds("copies made")
	for _, v := range []*Volume{w, r} {
		v.NotePlacement(ac, all, true)
	}
	write(180)
	bHolds("copied in the map")
	reps["b"].down.Store(true)
	check(r, "c, copied in the map, b down")
	reps["b"].down.Store(false)
	waitUntil(t, "b back", func() bool { return len(w.Down()) == 0 && len(w.StaleChunks()) == 0 })

	for _, v := range []*Volume{w, r} {
		v.NotePlacement(ac, nil, false)
	}
	old := slices.Clone(want)
	write(200)
	check(r, "c, ended")
	got := make([]byte, memCS)
	if err := reps["b"].ReadAt(ctx, "vol@1", onB[0], got, 0); err != nil || !bytes.Equal(got, old[onB[0]*memCS:(onB[0]+1)*memCS]) {
		t.Fatalf("b was written after the re-placement ended: %v, %d", err, got[0])
	}
}

// TestUndrainRevertsPlacement: a drain that ends while the copies are
// being made puts the set back, with the drained node current for every
// chunk it held: it was written throughout.
func TestUndrainRevertsPlacement(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c")
	all := []string{"a", "b", "c"}
	const chunks = 48
	cfg := memConfig("a", t.TempDir(), chunks*memCS, all, reps, nil)
	cfg.Spec.Copies = 1
	w := openMemConfig(t, cfg)
	want := bytes.Repeat([]byte{3}, chunks*memCS)
	if err := w.WriteAt(ctx, want, 0, true); err != nil {
		t.Fatal(err)
	}
	w.NotePlacement([]string{"a", "c"}, all, false)
	want = bytes.Repeat([]byte{4}, chunks*memCS)
	if err := w.WriteAt(ctx, want, 0, true); err != nil {
		t.Fatal(err)
	}
	w.NotePlacement(all, nil, false)
	if o := w.Owners(0); len(o) != 1 || !slices.Contains(all, o[0]) {
		t.Fatalf("owners after the revert: %v", o)
	}
	for c := int64(0); c < chunks; c++ {
		owner := w.Owners(c)[0]
		got := make([]byte, memCS)
		if err := reps[owner].ReadAt(ctx, "vol@1", c, got, 0); err != nil || got[0] != 4 {
			t.Fatalf("chunk %d on %s after the revert: %v, reads %d", c, owner, err, got[0])
		}
	}
}

// chunkPattern writes through a volume a pattern that differs per chunk
// (want; the same slice across writes) and checks volumes read it back.
type chunkPattern struct {
	t    *testing.T
	w    *Volume
	want []byte
}

func newChunkPattern(t *testing.T, w *Volume, chunks int) *chunkPattern {
	return &chunkPattern{t: t, w: w, want: make([]byte, chunks*memCS)}
}

// write fills every chunk c with fill+c and writes it through w, FUA.
func (p *chunkPattern) write(fill byte) {
	p.t.Helper()
	for i := range p.want {
		p.want[i] = fill + byte(i/memCS)
	}
	if err := p.w.WriteAt(context.Background(), p.want, 0, true); err != nil {
		p.t.Fatal(err)
	}
}

// check reads the whole volume through v and compares it with the last
// write.
func (p *chunkPattern) check(v *Volume, what string) {
	p.t.Helper()
	got := make([]byte, len(p.want))
	if err := v.ReadAt(context.Background(), got, 0); err != nil || !bytes.Equal(got, p.want) {
		p.t.Fatalf("%s: %v, equal %v", what, err, bytes.Equal(got, p.want))
	}
}

// placementOwners1 is the owner of chunk c of the copies=1 test volume
// over nodes.
func placementOwners1(nodes []string, c int64) []string {
	return placement.Owners(nodes, ChunkName("vol", c), 1)
}

// TestRebalanceAddsMirror: a rebalance adds a node the volumes were not
// opened with (AddMirrors). The chunks HRW gives it are copied there
// while writes go on; their old owners are written until the
// re-placement ends, and once the map records the copies made the writer
// asks to end it (Settle); after the end the old owners are not written,
// and the chunks read from the new owners with either of two down.
func TestRebalanceAddsMirror(t *testing.T) {
	ctx := context.Background()
	reps := memReps("a", "b", "c")
	ab, abc := []string{"a", "b"}, []string{"a", "b", "c"}
	const chunks = 48
	placed := make(chan []string, 4)
	settled := make(chan []string, 4)
	cfg := memConfig("a", t.TempDir(), chunks*memCS, ab, reps, nil)
	cfg.Placed = func(_ context.Context, nodes []string, _ uint64, _ []int64) error { placed <- nodes; return nil }
	cfg.Settle = func(_ context.Context, nodes []string, _ uint64) error { settled <- nodes; return nil }
	w := openMemConfig(t, cfg)
	r := openMemConfig(t, memConfig("b", t.TempDir(), chunks*memCS, ab, reps, nil))
	p := newChunkPattern(t, w, chunks)
	want, write, check := p.want, p.write, p.check
	// The chunks c takes, and the owner each takes it from.
	moved := map[int64]string{}
	for c := int64(0); c < chunks; c++ {
		after := placementOwners(abc, c)
		if slices.Contains(after, "c") {
			for _, id := range ab {
				if !slices.Contains(after, id) {
					moved[c] = id
				}
			}
		}
	}
	if len(moved) == 0 {
		t.Fatal("no chunk moves to c")
	}
	holds := func(rep, what string, data []byte, onlyFrom bool) {
		t.Helper()
		got := make([]byte, memCS)
		for c, from := range moved {
			if onlyFrom && from != rep {
				continue
			}
			if err := reps[rep].ReadAt(ctx, "vol@1", c, got, 0); err != nil || !bytes.Equal(got, data[c*memCS:(c+1)*memCS]) {
				t.Fatalf("%s: %s's copy of chunk %d: %v, reads %d want %d", what, rep, c, err, got[0], data[c*memCS])
			}
		}
	}
	write(1)

	for _, v := range []*Volume{w, r} {
		v.AddMirrors(abc, func(id string) Replica { return reps[id] })
		v.NotePlacement(abc, ab, false)
	}
	write(60) // while the copies are made
	check(r, "b, copying")
	select {
	case nodes := <-placed:
		if !slices.Equal(nodes, abc) {
			t.Fatalf("placed for %v", nodes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the copies to c were not made")
	}
	holds("c", "copies made", want, false)
	for _, v := range []*Volume{w, r} {
		v.NotePlacement(abc, ab, true)
	}
	write(120)
	for _, id := range ab {
		holds(id, "copied in the map", want, true)
	}
	select {
	case nodes := <-settled:
		if !slices.Equal(nodes, abc) {
			t.Fatalf("settled for %v", nodes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the writer did not ask to end the re-placement")
	}
	for _, v := range []*Volume{w, r} {
		v.NotePlacement(abc, nil, false)
	}
	old := slices.Clone(want)
	write(200)
	for _, id := range ab {
		holds(id, "ended", old, true) // no longer written
	}
	holds("c", "ended", want, false)
	for _, id := range abc {
		reps[id].down.Store(true)
		check(r, "b, ended, "+id+" down")
		reps[id].down.Store(false)
		waitUntil(t, id+" back", func() bool { return len(w.Down()) == 0 && len(r.Down()) == 0 })
	}
}
