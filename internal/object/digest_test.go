package object

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestDigestReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one byte", []byte{7}},
		{"several reads", bytes.Repeat([]byte("0123456789"), 100_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dr := NewDigestReader(iotest.HalfReader(bytes.NewReader(tc.data)))
			if _, err := dr.Digest(); !errors.Is(err, ErrIncompleteBody) {
				t.Fatalf("Digest before the end = %v, want ErrIncompleteBody", err)
			}
			got, err := io.ReadAll(dr)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("read %d bytes, %v", len(got), err)
			}
			d, err := dr.Digest()
			want := md5.Sum(tc.data)
			if err != nil || !bytes.Equal(d.MD5, want[:]) || d.CRC32C != crc32.Checksum(tc.data, Castagnoli) {
				t.Fatalf("Digest = %x/%08x, %v; want %x/%08x", d.MD5, d.CRC32C, err, want, crc32.Checksum(tc.data, Castagnoli))
			}
		})
	}
	// A body that fails before its end has no digest.
	dr := NewDigestReader(io.MultiReader(bytes.NewReader([]byte("abc")), iotest.ErrReader(io.ErrUnexpectedEOF)))
	if _, err := io.ReadAll(dr); err == nil {
		t.Fatal("ReadAll of a failing body succeeded")
	}
	if _, err := dr.Digest(); !errors.Is(err, ErrIncompleteBody) {
		t.Fatalf("Digest of a failed body = %v, want ErrIncompleteBody", err)
	}
}

func FuzzParseDigest(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1}, DigestLen))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseDigest(b)
		if len(b) != DigestLen {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("ParseDigest of %d bytes = %v, want ErrInvalidArgument", len(b), err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		again, err := d.AppendBinary(nil)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip %x -> %x, %v", b, again, err)
		}
	})
}

func TestMultipartETag(t *testing.T) {
	a, b := md5.Sum([]byte("part one")), md5.Sum([]byte("part two"))
	whole := md5.Sum(append(a[:], b[:]...))
	want := hex.EncodeToString(whole[:]) + "-2"
	for _, tc := range []struct {
		name  string
		parts []CompletePart
		want  string
		err   error
	}{
		{"plain", []CompletePart{{1, hex.EncodeToString(a[:])}, {2, hex.EncodeToString(b[:])}}, want, nil},
		{"quoted upper case", []CompletePart{{1, `"` + strings.ToUpper(hex.EncodeToString(a[:])) + `"`}, {2, hex.EncodeToString(b[:])}}, want, nil},
		{"one part", []CompletePart{{1, hex.EncodeToString(a[:])}}, func() string { s := md5.Sum(a[:]); return hex.EncodeToString(s[:]) + "-1" }(), nil},
		{"not hex", []CompletePart{{1, "zz"}}, "", ErrInvalidPart},
		{"short", []CompletePart{{1, "abcd"}}, "", ErrInvalidPart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MultipartETag(tc.parts)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("MultipartETag = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}
