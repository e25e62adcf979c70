package callbench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Row is one measured configuration of a report: what ran (Kind: the
// floor, or an outcome of a governed call), on which store, and its
// Result. Against the floor measured at the same number of callers in
// the same run it carries the ratio of throughputs and of p50s; a floor
// row carries 1 and 1.
type Row struct {
	Store string `json:"store"`
	Kind  string `json:"kind"`
	Result
	// OfFloor is PerSecond ÷ the floor's PerSecond; P50OverFloor is P50 ÷
	// the floor's P50. Zero when the floor measured nothing.
	OfFloor      float64 `json:"of_floor"`
	P50OverFloor float64 `json:"p50_over_floor"`
}

// Compare fills the ratios of r against floor.
func (r *Row) Compare(floor Result) {
	if floor.PerSecond > 0 {
		r.OfFloor = r.PerSecond / floor.PerSecond
	}
	if floor.P50 > 0 {
		r.P50OverFloor = float64(r.P50) / float64(floor.P50)
	}
}

// WriteTable writes rows as a Markdown table: the form the README
// publishes, readable in a terminal too. Store and kind are the
// program's own words, never input, so nothing in a cell needs escaping.
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| store | kind | callers | ops | failed | ops/s | p50 | p99 | ÷ floor ops/s | p50 ÷ floor p50 | CPU/op | of it kernel |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %.0f | %s | %s | %.2f | %.1f | %s | %s |\n",
			r.Store, r.Kind, r.Callers, r.Ops, r.Failed, r.PerSecond, ms(r.P50), ms(r.P99), r.OfFloor, r.P50OverFloor, us(r.CPUPerOp), us(r.KernelPerOp))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// us formats d in whole microseconds: the scale of the CPU an operation
// costs.
func us(d time.Duration) string {
	return fmt.Sprintf("%d µs", d.Microseconds())
}

// ms formats d in milliseconds with two decimals: the scale of a durable
// write.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
