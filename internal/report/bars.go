package report

import "fmt"

// Bars is one coloured set of bars of a comparison chart: one value per
// category.
type Bars struct {
	Name   string
	Values []float64
}

// BarChart renders a grouped bar chart as a PNG at path, in the style of
// the report's own comparison charts. Benchmarks that do not produce
// loader results (the NBD fio matrix, say) use it for their plots.
func BarChart(path, title, yLabel string, categories []string, bars []Bars) error {
	groups := make([]barGroup, len(bars))
	for i, b := range bars {
		if len(b.Values) != len(categories) {
			return fmt.Errorf("report: %s: %q has %d values for %d categories", title, b.Name, len(b.Values), len(categories))
		}
		groups[i] = barGroup{name: b.Name, values: b.Values}
	}
	p, err := barPlot(title, yLabel, categories, groups)
	if err != nil {
		return err
	}
	return save(p, path)
}
