package report

import (
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBucketSpans(t *testing.T) {
	for i, tt := range []struct {
		endMs int64
		n     int
		want  []int64
	}{
		{endMs: 2999, n: 3, want: []int64{1000, 1000, 1000}},
		{endMs: 2099, n: 3, want: []int64{1000, 1000, 100}},
		{endMs: 2000, n: 3, want: []int64{1000, 1000, 1}},
		{endMs: 156, n: 1, want: []int64{157}},
		{endMs: 60000, n: 3, want: []int64{1000, 1000, 1000}}, // the log ends after the series
		{endMs: 0, n: 0, want: []int64{}},
	} {
		got := bucketSpans(0, 1000, tt.endMs, tt.n)
		if !slices.Equal(got, tt.want) {
			t.Errorf("step %d: got %v, want %v", i, got, tt.want)
		}
	}
}

func TestPlot(t *testing.T) {
	for i, tt := range []struct {
		values  []int64
		endMs   int64
		rate    bool
		want    []float64
		partial bool // the last point is partial
	}{
		// A steady 1000 requests/s: the last bucket's 100 requests in 100 ms are no dip.
		{values: []int64{1000, 1000, 100}, endMs: 2099, rate: true, want: []float64{1000, 1000, 1000}, partial: true},
		{values: []int64{1000, 1000, 1000}, endMs: 2999, rate: true, want: []float64{1000, 1000, 1000}},
		// 5 ms of a 1 s bucket would be a spike: it is left out.
		{values: []int64{1000, 1000, 50}, endMs: 2004, rate: true, want: []float64{1000, 1000}},
		// A maximum per bucket is not divided by time.
		{values: []int64{8, 8, 3}, endMs: 2004, want: []float64{8, 8, 3}, partial: true},
		// The only bucket is drawn however short.
		{values: []int64{109}, endMs: 156, rate: true, want: []float64{109 * 1000 / 157.0}, partial: true},
		{values: []int64{5}, endMs: 0, rate: true, want: []float64{5000}, partial: true},
	} {
		pts := plot(tt.values, 0, 1000, bucketSpans(0, 1000, tt.endMs, len(tt.values)), tt.rate)
		var got []float64
		for _, p := range pts {
			got = append(got, p.v)
		}
		if len(got) != len(tt.want) {
			t.Errorf("step %d: got %v, want %v", i, got, tt.want)
			continue
		}
		for j := range got {
			if math.Abs(got[j]-tt.want[j]) > 1e-9 {
				t.Errorf("step %d: got %v, want %v", i, got, tt.want)
				break
			}
		}
		if last := pts[len(pts)-1]; last.partial != tt.partial {
			t.Errorf("step %d: last point partial: got %v, want %v", i, last.partial, tt.partial)
		}
	}
}

func TestSVGChart(t *testing.T) {
	rates := func(s Series) chart {
		return chart{title: "Requests", unit: "requests/s", each: "averaged over", rate: true,
			lines: []line{{"requests", "#000", s.Requests, solid}}}
	}
	for _, tt := range []struct {
		name  string
		s     Series
		endMs int64
		want  []string
		not   []string
	}{
		{name: "one bucket", s: Series{BucketMs: 5000, Requests: []int64{300}}, endMs: 1499,
			want: []string{"<circle", "requests/s, averaged over each 5 s bucket", "one bucket (hollow dot): the log covers 1.5 s of it", ">200<"},
			not:  []string{"<polyline", "no data"}},
		{name: "partial last bucket", s: Series{BucketMs: 1000, Requests: []int64{10, 12, 2}}, endMs: 2199,
			want: []string{`stroke-opacity="0.4"`, "<circle", "faded, hollow dot: the last bucket covers only 0.2 s of 1 s"}},
		{name: "sliver of a last bucket", s: Series{BucketMs: 1000, Requests: []int64{10, 12, 2}}, endMs: 2009,
			want: []string{"the last 0.01 s of the log, a partial bucket, is too short to rate and not drawn"},
			not:  []string{`stroke-opacity="0.4"`}},
		{name: "whole buckets", s: Series{BucketMs: 1000, Requests: []int64{10, 12, 2}}, endMs: 2999,
			want: []string{"<polyline", "<circle"}, not: []string{"faded", `stroke-opacity`}},
		{name: "no buckets", s: Series{BucketMs: 1000, Requests: []int64{}},
			want: []string{"no data"}, not: []string{"<polyline", "<circle"}},
	} {
		got := svgChart(rates(tt.s), tt.s, tt.endMs)
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: chart lacks %q:\n%s", tt.name, w, got)
			}
		}
		for _, w := range tt.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: chart has %q:\n%s", tt.name, w, got)
			}
		}
	}
	// Many buckets are a line without dots.
	s := Series{BucketMs: 1000, Requests: make([]int64, maxMarkers+1)}
	if got := svgChart(rates(s), s, int64(len(s.Requests))*1000-1); strings.Contains(got, "<circle") {
		t.Errorf("%d buckets: got dots, want none", len(s.Requests))
	}
}

func TestLeaseChartNotRated(t *testing.T) {
	s := Series{BucketMs: 1000, Lease: []int64{40, 40, 40}}
	got := svgChart(chart{title: "Largest lease batch", unit: "tokens", each: "the largest in",
		lines: []line{{"lease", "#000", s.Lease, solid}}}, s, 2099)
	// Divided by 0.1 s the last bucket would read 400 and push the axis to 400.
	if !strings.Contains(got, ">40<") || strings.Contains(got, ">400<") {
		t.Errorf("lease axis: want a top tick of 40, got:\n%s", got)
	}
	if !strings.Contains(got, "tokens, the largest in each 1 s bucket") {
		t.Errorf("lease chart lacks its unit and bucket width:\n%s", got)
	}
}

func TestHTMLRequestFigures(t *testing.T) {
	r := sample(2)
	r.Totals.RequestsWouldDeny, r.Totals.RequestsDenied, r.Totals.DenyRate = 7, 4, 0.007
	r.AssignMissing, r.Reordered, r.Settings.Assignment = 10, 3, "hash:user"
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"requests would be denied (0.70% of requests)", "<b>7</b>", "requests rejected at their stage",
		"a request two rules deny counts twice", "10 records (1.00%) lack the field of --assign hash:user; they all went to one gateway.",
		"3 records were logged before an earlier one"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// A long identity wraps in its cell rather than widen the page past its figures: code (an
// identity, a rule's name) wraps anywhere, and the cells of figures never.
func TestHTMLLongValuesWrap(t *testing.T) {
	r := sample(1)
	long := "tenant=" + strings.Repeat("A", 400)
	r.Rules[0].TopDenied = []Identity{{Value: long, Denials: 35, Requests: 40}}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.Contains(s, "<td class=l><code>"+long+"</code></td><td>35</td>") {
		t.Fatalf("HTML lacks the identity in a text cell beside its figures:\n%s", s)
	}
	css := styles(s)
	for _, tt := range []struct{ selector, decl string }{
		{"code", "overflow-wrap:anywhere"}, {"td:not(.l)", "white-space:nowrap"},
	} {
		if !slices.Contains(css[tt.selector], tt.decl) {
			t.Errorf("style of %s: got %q, want %s among them", tt.selector, css[tt.selector], tt.decl)
		}
	}
}

// styles returns the declarations of each selector in page's style sheet, which writes each
// rule on one line as SELECTOR,...{DECL;...}.
func styles(page string) map[string][]string {
	css := map[string][]string{}
	_, sheet, _ := strings.Cut(page, "<style>")
	sheet, _, _ = strings.Cut(sheet, "</style>")
	for _, m := range regexp.MustCompile(`([^{}]+)\{([^{}]*)\}`).FindAllStringSubmatch(sheet, -1) {
		for _, sel := range strings.Split(m[1], ",") {
			sel = strings.TrimSpace(sel)
			css[sel] = append(css[sel], strings.Split(m[2], ";")...)
		}
	}
	return css
}

func TestHTMLOneBucket(t *testing.T) {
	// A log shorter than a bucket: each chart has one point, which must be visible.
	r := sample(1)
	r.EndMs = r.StartMs + 156
	r.Rules[0].Series = Series{StartMs: r.StartMs, BucketMs: 1000, Requests: []int64{109}, WouldDeny: []int64{0},
		IdealDeny: []int64{0}, Lease: []int64{19}}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if got, want := strings.Count(s, "<circle"), 4; got != want {
		t.Errorf("dots: got %d, want %d (one per line)", got, want)
	}
	for _, want := range []string{"requests/s, averaged over each 1 s bucket", "tokens, the largest in each 1 s bucket",
		"one bucket (hollow dot): the log covers 0.157 s of it"} {
		if !strings.Contains(s, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

func TestTickLabel(t *testing.T) {
	for i, tt := range []struct {
		v, step float64
		want    string
	}{
		{0, 0.0005, "0"},
		{0.0005, 0.0005, "0.0005"},
		{0.001, 0.0005, "0.001"},
		{3 * 0.0005, 0.0005, "0.0015"},
		{0.3, 0.1, "0.3"},
		{0.75, 0.25, "0.75"},
		{200, 50, "200"},
		{1500, 500, "1.5k"},
		{2000, 500, "2k"},
		{7500, 2500, "7.5k"},
		{1.5e6, 5e5, "1.5M"},
		{1.25e-7, 2.5e-8, "0.000000125"},
	} {
		if got := tickLabel(tt.v, tt.step); got != tt.want {
			t.Errorf("step %d: tickLabel(%g, %g): got %q, want %q", i, tt.v, tt.step, got, tt.want)
		}
	}
}

func TestSparseChartTicks(t *testing.T) {
	// One request in a 1024 s bucket is under a thousandth of a request a second: rounded to
	// three decimals the ticks would read 0, 0.001, 0.001, 0.002, 0.002.
	s := Series{BucketMs: 1024000, Requests: []int64{1}}
	got := svgChart(chart{title: "Requests", unit: "requests/s", each: "averaged over", rate: true,
		lines: []line{{"requests", "#000", s.Requests, solid}}}, s, 1024000-1)
	var labels []string
	for _, m := range regexp.MustCompile(`<text x="50" y="[0-9.]+" text-anchor="end" fill="#656d76">([^<]*)</text>`).FindAllStringSubmatch(got, -1) {
		labels = append(labels, m[1])
	}
	if want := []string{"0", "0.0005", "0.001", "0.0015", "0.002"}; !slices.Equal(labels, want) {
		t.Errorf("y ticks: got %q, want %q", labels, want)
	}
}

// The x axis's labels say what the ticks' spacing needs: the fraction of a second, the date,
// and, with ticks days apart, the year when the chart spans more than one.
func TestXTicks(t *testing.T) {
	day := int64(86_400_000)
	start := time.Date(2024, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()
	for i, tt := range []struct {
		spanMs int64
		want   []string
	}{
		{200, []string{"12:00:00.000", "12:00:00.050", "12:00:00.100", "12:00:00.150", "12:00:00.200"}},
		{4000, []string{"12:00:00", "12:00:01", "12:00:02", "12:00:03", "12:00:04"}},
		{4 * day, []string{"Nov 30 12:00", "Dec 1 12:00", "Dec 2 12:00", "Dec 3 12:00", "Dec 4 12:00"}},
		{40 * day, []string{"Nov 30 2024", "Dec 10 2024", "Dec 20 2024", "Dec 30 2024", "Jan 9 2025"}},
		{4 * 365 * day, []string{"Nov 30 2024", "Nov 30 2025", "Nov 30 2026", "Nov 30 2027", "Nov 29 2028"}},
	} {
		var b strings.Builder
		writeXTicks(&b, frame{startMs: start, spanMs: tt.spanMs, yMax: 1})
		var got []string
		for _, m := range regexp.MustCompile(`<text [^>]*>([^<]*)</text>`).FindAllStringSubmatch(b.String(), -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("step %d: got %q, want %q", i, got, tt.want)
		}
	}
}

// When the leased gateways deny exactly as the ideal bucket does, the would-deny line lies on
// the ideal-deny line: the ideal one is a wide, pale band drawn first, so both stay visible.
func TestIdealDenyVisibleUnderWouldDeny(t *testing.T) {
	r := sample(1)
	s := &r.Rules[0].Series
	s.WouldDeny, s.IdealDeny = []int64{0, 2, 1}, []int64{0, 2, 1}
	var b strings.Builder
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	ideal := strings.Index(html, `<polyline fill="none" stroke="#8250df" stroke-width="7" stroke-opacity="0.35"`)
	would := strings.Index(html, `<polyline fill="none" stroke="#cf222e" stroke-width="1.5"`)
	if ideal < 0 || would < 0 {
		t.Fatalf("got ideal deny at %d and would deny at %d, want a wide pale band and a thin line", ideal, would)
	}
	if ideal > would {
		t.Error("the ideal-deny band is drawn over the would-deny line, want it under")
	}
	if !regexp.MustCompile(`<line x1="\d+" y1="239" x2="\d+" y2="239" stroke="#8250df" stroke-width="7" stroke-opacity="0.35"/>`).MatchString(html) {
		t.Error("the legend's swatch of ideal deny is not drawn as the band is")
	}
}
