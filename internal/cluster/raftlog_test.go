package cluster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/slipstream-io/slipstream/internal/logthrottle"
)

// records keeps the slog records it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// take returns the records so far and forgets them.
func (r *records) take() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.recs
	r.recs = nil
	return out
}

func attrsOf(rec slog.Record) map[string]string {
	out := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool { out[a.Key] = a.Value.String(); return true })
	return out
}

// Raft's records reach slog with their level, message and attributes (no
// second time stamp in the message), and a warning or error repeated for
// one peer is logged once per window, with the count left out.
func TestRaftLog(t *testing.T) {
	var got records
	now := time.Unix(1000, 0)
	rl := newHCLogger(slog.New(&got)).(*raftLog)
	rl.th = logthrottle.New(repeatWindow, func() time.Time { return now })
	hl := rl.Named("net").With("id", "node1")
	refused := errors.New("dial tcp 127.0.1.3:9200: connect: connection refused")

	hl.Info("entering follower state", "leader-address", "127.0.1.1:9200")
	hl.Error("failed to heartbeat to", "peer", "127.0.1.3:9200", "backoff time", 500*time.Millisecond, "error", refused)
	recs := got.take()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	if recs[0].Level != slog.LevelInfo || recs[0].Message != "entering follower state" || attrsOf(recs[0])["leader-address"] != "127.0.1.1:9200" {
		t.Errorf("info record: %v %q %v", recs[0].Level, recs[0].Message, attrsOf(recs[0]))
	}
	a := attrsOf(recs[1])
	if recs[1].Level != slog.LevelError || recs[1].Message != "failed to heartbeat to" || a["peer"] != "127.0.1.3:9200" ||
		a["error"] != refused.Error() || a["module"] != "raft.net" || a["id"] != "node1" || a["backoff_time"] != "500ms" || strings.Contains(recs[1].Message, "[ERROR]") {
		t.Errorf("error record: %v %q %v", recs[1].Level, recs[1].Message, a)
	}

	// Values hclog formats itself: raft logs its configuration with
	// hclog.Fmt("%+v", ...).
	hl.Info("initial configuration", "servers", hclog.Fmt("%+v", struct{ ID string }{"node1"}), "mode", hclog.Octal(0o750), "flags", hclog.Hex(255))
	a = attrsOf(got.take()[0])
	if a["servers"] != "{ID:node1}" || a["mode"] != "0750" || a["flags"] != "0xff" {
		t.Errorf("formatted values: %v", a)
	}

	// Twice a second for 29 s: left out; another peer's is not.
	for range 58 {
		now = now.Add(500 * time.Millisecond)
		hl.Error("failed to heartbeat to", "peer", "127.0.1.3:9200", "error", refused)
	}
	hl.Error("failed to heartbeat to", "peer", "127.0.1.4:9200", "error", refused)
	hl.Info("entering follower state", "leader-address", "127.0.1.1:9200")
	if recs := got.take(); len(recs) != 2 || attrsOf(recs[0])["peer"] != "127.0.1.4:9200" || recs[1].Level != slog.LevelInfo {
		t.Fatalf("within the window: %d records, want the other peer's error and the info: %v", len(recs), recs)
	}
	// Past the window: logged again, with the count left out.
	now = now.Add(1500 * time.Millisecond)
	hl.Error("failed to heartbeat to", "peer", "127.0.1.3:9200", "error", refused)
	recs = got.take()
	if len(recs) != 1 || attrsOf(recs[0])["repeated"] != "58" {
		t.Fatalf("after the window: %d records %v, want one with repeated=58", len(recs), recs)
	}
	// Raft's standard logger writes lines: kept, as info.
	hl.StandardLogger(nil).Print("plain text")
	if recs := got.take(); len(recs) != 1 || recs[0].Message != "plain text" || recs[0].Level != slog.LevelInfo {
		t.Errorf("plain line: %v", recs)
	}
	// Below the level: nothing.
	hl.Debug("detail")
	if recs := got.take(); len(recs) != 0 {
		t.Errorf("debug record at level info: %v", recs)
	}
}
