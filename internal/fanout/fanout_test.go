package fanout

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"time"
)

func TestCopy(t *testing.T) {
	body := make([]byte, 3*ChunkSize+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	for _, consumers := range []int{1, 2, 3} {
		for _, size := range []int{0, 1, ChunkSize, len(body)} {
			for round := 0; round < 3; round++ { // later rounds reuse pooled chunks
				got := make([][]byte, consumers)
				fns := make([]func(io.Reader) error, consumers)
				for i := range fns {
					fns[i] = func(rd io.Reader) error {
						if i == 1 {
							rd = iotest.HalfReader(rd) // a reader that takes less each time
						}
						var err error
						got[i], err = io.ReadAll(rd)
						return err
					}
				}
				for i, err := range Copy(context.Background(), bytes.NewReader(body[:size]), fns...) {
					if err != nil {
						t.Fatalf("%d consumers, size %d: consumer %d: %v", consumers, size, i, err)
					}
					if !bytes.Equal(got[i], body[:size]) {
						t.Fatalf("%d consumers, size %d round %d: consumer %d got %d bytes, different content", consumers, size, round, i, len(got[i]))
					}
				}
			}
		}
	}
}

func TestCopyStops(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4*ChunkSize)
	// A consumer that stops early ends the copy (once its queue is full);
	// the others learn why.
	quitter := func(rd io.Reader) error {
		_, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(rd, 1000)))
		return err
	}
	var otherErr error
	errs := Copy(context.Background(), bytes.NewReader(body), quitter, func(rd io.Reader) error {
		_, otherErr = io.ReadAll(rd)
		return otherErr
	})
	if errs[0] != nil || !errors.Is(errs[1], ErrConsumerDone) || !errors.Is(otherErr, ErrConsumerDone) {
		t.Fatalf("early stop: %v", errs)
	}
	// A failing source fails every consumer.
	boom := errors.New("client went away")
	readAll := func(rd io.Reader) error { _, err := io.ReadAll(rd); return err }
	for i, err := range Copy(context.Background(), io.MultiReader(bytes.NewReader(body[:5000]), iotest.ErrReader(boom)), readAll, readAll, readAll) {
		if !errors.Is(err, boom) {
			t.Fatalf("failing source: consumer %d: %v", i, err)
		}
	}
	// So does the end of the context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range Copy(ctx, bytes.NewReader(body), readAll, readAll) {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled: consumer %d: %v", i, err)
		}
	}
}

// TestCopySourceUnexpectedEOF: a source that fails with io.ErrUnexpectedEOF
// (an HTTP body cut short of its Content-Length, a peer's reader missing
// bytes) is a failed source, not the end of the stream: every consumer
// reads that error and none takes the bytes so far as a complete body.
func TestCopySourceUnexpectedEOF(t *testing.T) {
	body := bytes.Repeat([]byte("x"), ChunkSize+5000)
	for _, size := range []int{0, 5000, ChunkSize, len(body)} {
		src := io.MultiReader(bytes.NewReader(body[:size]), iotest.ErrReader(io.ErrUnexpectedEOF))
		readAll := func(rd io.Reader) error { _, err := io.ReadAll(rd); return err }
		for i, err := range Copy(context.Background(), src, readAll, readAll) {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("source cut after %d bytes: consumer %d: %v, want io.ErrUnexpectedEOF", size, i, err)
			}
		}
	}
}

// A consumer that fails before reading is replaced by its spare, which
// reads the whole stream even when it is longer than the queue and the
// spare takes a while to come; one that fails after reading is not.
func TestCopySpare(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), (Depth+3)*ChunkSize/16+7)
	refused := errors.New("connection refused")
	var got, other []byte
	var asked []int
	spare := func(i int, err error) func(io.Reader) error {
		asked = append(asked, i)
		if !errors.Is(err, refused) {
			return nil
		}
		time.Sleep(50 * time.Millisecond) // the map has to say the node is down
		return func(rd io.Reader) error {
			var err error
			got, err = io.ReadAll(rd)
			return err
		}
	}
	errs := CopySpare(context.Background(), bytes.NewReader(body), spare,
		func(rd io.Reader) error { var err error; other, err = io.ReadAll(rd); return err },
		func(io.Reader) error { return refused })
	if errs[0] != nil || errs[1] != nil || !bytes.Equal(got, body) || !bytes.Equal(other, body) || len(asked) != 1 || asked[0] != 1 {
		t.Fatalf("errs %v, spare asked for %v, spare got %d bytes, the other %d of %d", errs, asked, len(got), len(other), len(body))
	}

	// Failed after reading: no spare, the copy stops.
	asked = nil
	cut := errors.New("connection reset")
	errs = CopySpare(context.Background(), bytes.NewReader(body), spare,
		func(rd io.Reader) error { _, err := io.ReadAll(rd); return err },
		func(rd io.Reader) error { _, _ = io.ReadFull(rd, make([]byte, 10)); return cut })
	if !errors.Is(errs[0], ErrConsumerDone) || !errors.Is(errs[1], cut) || len(asked) != 0 {
		t.Fatalf("a consumer failed after reading: errs %v, spare asked for %v", errs, asked)
	}

	// No spare to give: the copy stops as without one.
	errs = CopySpare(context.Background(), bytes.NewReader(body), func(int, error) func(io.Reader) error { return nil },
		func(rd io.Reader) error { _, err := io.ReadAll(rd); return err },
		func(io.Reader) error { return refused })
	if !errors.Is(errs[0], ErrConsumerDone) || !errors.Is(errs[1], refused) {
		t.Fatalf("no spare: errs %v", errs)
	}
}
