package heatmap

import (
	"bytes"
	"context"
	"image/png"
	"testing"

	"github.com/slipstream-io/slipstream/internal/fabric"
)

func TestWritePNG(t *testing.T) {
	for _, dir := range []string{"ft2-h16/minhop/after", "ft3-k8-h128/ftree/after"} {
		m, err := fabric.Load(context.Background(), "../testdata/samples/"+dir)
		if err != nil {
			t.Fatal(err)
		}
		a, err := m.Analyze(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := Write(&buf, m, a, dir); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", dir, err)
		}
		b := img.Bounds()
		if b.Dx() < 500 || b.Dy() < 300 {
			t.Errorf("%s: image %v too small", dir, b)
		}
		// a heat map has many colours, not a blank canvas
		colours := map[[3]uint32]bool{}
		for y := b.Min.Y; y < b.Max.Y; y += 3 {
			for x := b.Min.X; x < b.Max.X; x += 3 {
				r, g, bl, _ := img.At(x, y).RGBA()
				colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			}
		}
		if len(colours) < 8 {
			t.Errorf("%s: only %d colours", dir, len(colours))
		}
	}
}
