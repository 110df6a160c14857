// Package heatmap draws the link loads of a fabric as PNG heat maps: one row
// per switch, one column per port, colour = routes leaving through the port
// (left) and arriving through it (right). Unconnected ports are black.
package heatmap

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/slipstream-io/slipstream/internal/fabric"
)

// grid is a switches x ports matrix for plotter.HeatMap.
type grid struct {
	rows, cols int
	v          []float64
}

func (g *grid) Dims() (c, r int)   { return g.cols, g.rows }
func (g *grid) Z(c, r int) float64 { return g.v[r*g.cols+c] }
func (g *grid) X(c int) float64    { return float64(c + 1) }
func (g *grid) Y(r int) float64    { return float64(r) }

// Write renders the loads of a as a PNG to w.
func Write(w io.Writer, m *fabric.Model, a *fabric.Analysis, title string) error {
	type row struct {
		desc string
		node int32
	}
	var rows []row
	maxPorts := 0
	for _, ni := range m.Switches {
		n := m.Nodes[ni]
		rows = append(rows, row{n.Desc, ni})
		maxPorts = max(maxPorts, n.NumPorts)
	}
	if len(rows) == 0 || maxPorts == 0 {
		return fmt.Errorf("%w: no switch ports to draw", fabric.ErrNotFound)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].desc < rows[j].desc })
	out := &grid{rows: len(rows), cols: maxPorts, v: make([]float64, len(rows)*maxPorts)}
	in := &grid{rows: len(rows), cols: maxPorts, v: make([]float64, len(rows)*maxPorts)}
	hi := 1.0
	for r, rw := range rows {
		n := m.Nodes[rw.node]
		for c := 0; c < maxPorts; c++ {
			out.v[r*maxPorts+c], in.v[r*maxPorts+c] = math.NaN(), math.NaN()
			p := c + 1
			if p > n.NumPorts {
				continue
			}
			id := m.PortID(rw.node, p)
			peer := m.Ports[id].Peer
			if peer < 0 {
				continue
			}
			o, i := float64(a.Load[id]), float64(a.Load[peer])
			out.v[r*maxPorts+c], in.v[r*maxPorts+c] = o, i
			hi = math.Max(hi, math.Max(o, i))
		}
	}
	pal := moreland.SmoothBlueRed()
	pal.SetMin(0)
	pal.SetMax(hi)
	mk := func(g *grid, what string) *plot.Plot {
		p := plot.New()
		p.Title.Text = what
		p.X.Label.Text = "port"
		p.Y.Label.Text = fmt.Sprintf("switch (%d, sorted by name)", len(rows))
		h := plotter.NewHeatMap(g, pal.Palette(255))
		h.Min, h.Max = 0, hi
		h.NaN = color.Black
		p.Add(h)
		return p
	}
	po := mk(out, title+": routes out of each port")
	pi := mk(in, fmt.Sprintf("routes into each port (max %.0f)", hi))
	// label a few rows with switch names
	step := max(1, len(rows)/40)
	var ticks []plot.Tick
	for r := 0; r < len(rows); r += step {
		ticks = append(ticks, plot.Tick{Value: float64(r), Label: rows[r].desc})
	}
	po.Y.Tick.Marker = plot.ConstantTicks(ticks)
	pi.Y.Tick.Marker = plot.ConstantTicks(ticks)
	height := vg.Length(math.Min(30, math.Max(5, 2+float64(len(rows))*0.02))) * vg.Inch
	width := vg.Length(math.Min(24, math.Max(10, 4+float64(maxPorts)*0.25))) * vg.Inch
	barH := vg.Inch
	img := vgimg.New(width, height+barH)
	dc := draw.New(img)
	maps := draw.Crop(dc, 0, 0, barH, 0)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	cs := plot.Align([][]*plot.Plot{{po, pi}}, tiles, maps)
	po.Draw(cs[0][0])
	pi.Draw(cs[0][1])
	// colour scale
	bar := plot.New()
	bar.HideY()
	bar.X.Label.Text = "routes per link direction (black: port not cabled)"
	bar.Add(&plotter.ColorBar{ColorMap: pal})
	bar.Draw(draw.Crop(dc, vg.Inch, -vg.Inch, vg.Millimeter*2, -(height - vg.Millimeter*2)))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
