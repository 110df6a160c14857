package loader

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A run interrupted half-way (Ctrl-C) returns its partial result with the
// error; the result is marked Partial with the error's text, the mark
// survives the result file, and the table labels the run as partial.
func TestInterruptedRunResultIsMarkedPartial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	res, err := Run(ctx, Config{Endpoint: slowTarget(t, 5*time.Millisecond), Bucket: "b", PutPercent: 100, Duration: 10 * time.Second,
		Workers: 2, MinSize: 16, Seed: 1})
	if err == nil || res == nil {
		t.Fatalf("res=%v err=%v, want a partial result and an error", res, err)
	}
	if !res.Partial || res.Error != err.Error() {
		t.Errorf("partial=%v error=%q, want true and %q", res.Partial, res.Error, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := res.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Partial || got.Error != res.Error {
		t.Errorf("read back partial=%v error=%q, want true and %q", got.Partial, got.Error, res.Error)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory after WriteJSON, want only the result (no temporary left)", len(ents))
	}
	var b strings.Builder
	if err := PrintTable(&b, got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(partial)") {
		t.Errorf("table does not mark the partial run:\n%s", b.String())
	}
}

// A run that completes is not marked partial.
func TestCompleteRunResultIsNotPartial(t *testing.T) {
	res, err := Run(context.Background(), Config{Endpoint: slowTarget(t, 0), Bucket: "b", PutPercent: 100, MaxOps: 3,
		Workers: 1, MinSize: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Partial || res.Error != "" {
		t.Errorf("partial=%v error=%q, want a complete run", res.Partial, res.Error)
	}
}
