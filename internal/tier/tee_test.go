package tier

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

func TestTee(t *testing.T) {
	body := make([]byte, 3*teeChunk+12345)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	readAllSlowly := func(small bool) func(io.Reader) ([]byte, error) {
		return func(rd io.Reader) ([]byte, error) {
			if small {
				rd = iotest.OneByteReader(io.LimitReader(rd, 1000)) // a slow, picky reader first
				head, err := io.ReadAll(rd)
				return head, err
			}
			return io.ReadAll(rd)
		}
	}
	for _, size := range []int{0, 1, teeChunk, len(body)} {
		for round := 0; round < 3; round++ { // later rounds reuse pooled chunks
			var got [2][]byte
			consumer := func(i int) func(io.Reader) error {
				return func(rd io.Reader) error {
					var err error
					got[i], err = readAllSlowly(false)(rd)
					return err
				}
			}
			errA, errB := tee(context.Background(), bytes.NewReader(body[:size]), consumer(0), consumer(1))
			if errA != nil || errB != nil {
				t.Fatalf("size %d: %v %v", size, errA, errB)
			}
			for i := range got {
				if !bytes.Equal(got[i], body[:size]) {
					t.Fatalf("size %d round %d: consumer %d got %d bytes, different content", size, round, i, len(got[i]))
				}
			}
		}
	}
	// A consumer that stops early ends the copy (once its queue is full);
	// the other one learns why.
	big := bytes.Repeat(body, 4)
	quitter := func(rd io.Reader) error {
		_, err := readAllSlowly(true)(rd)
		return err
	}
	var otherErr error
	errA, errB := tee(context.Background(), bytes.NewReader(big), quitter, func(rd io.Reader) error {
		_, otherErr = io.ReadAll(rd)
		return otherErr
	})
	if errA != nil || !errors.Is(errB, errConsumerDone) || !errors.Is(otherErr, errConsumerDone) {
		t.Fatalf("early stop: %v / %v", errA, errB)
	}
	// A failing source fails both.
	boom := errors.New("client went away")
	errA, errB = tee(context.Background(), io.MultiReader(bytes.NewReader(body[:5000]), iotest.ErrReader(boom)),
		func(rd io.Reader) error { _, err := io.ReadAll(rd); return err },
		func(rd io.Reader) error { _, err := io.ReadAll(rd); return err })
	if !errors.Is(errA, boom) || !errors.Is(errB, boom) {
		t.Fatalf("failing source: %v / %v", errA, errB)
	}
}
