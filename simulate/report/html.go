package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteHTML writes r as one self-contained HTML page: inline CSS and inline SVG charts of each
// rule's request and denial rates over time and of its lease size. It loads nothing from anywhere.
func WriteHTML(w io.Writer, r *Report) error {
	var b strings.Builder
	t := r.Totals
	legend := Legend(r)
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rlctl simulate report</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#1f2328;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px} .muted{color:#656d76;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 16px}
.card{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px} .card span{font-size:12px;color:#656d76}
.group{font-size:13px;font-weight:600;margin-top:16px}
.warn{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin:8px 0;font-size:14px}
.bad{color:#cf222e} .ok{color:#1a7f37} .card b.none{font-size:16px;color:#656d76}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right}
th{background:#f6f8fa} td.l,th.l{text-align:left} td:not(.l){white-space:nowrap}
code{font-size:12px;overflow-wrap:anywhere}
.charts{display:flex;flex-wrap:wrap;gap:16px} svg{background:#fff;border:1px solid #eaeef2;border-radius:4px}
pre{background:#f6f8fa;padding:8px;font-size:12px;overflow-x:auto}
th[title],.card[title]{cursor:help} th[title]{text-decoration:underline dotted #8c959f}
dl.legend{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;font-size:13px;margin:8px 0}
dl.legend dt{font-weight:600} dl.legend dd{margin:0}
</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>rlctl simulate</h1>\n<div class=\"muted\">policies <code>%s</code> &middot; logs <code>%s</code> &middot; %s &middot; %d gateways (%s) &middot; store latency %s</div>\n",
		htmlEscape(r.Policies), htmlEscape(strings.Join(r.Logs, ", ")), htmlEscape(window(r)), r.Settings.Gateways, htmlEscape(r.Settings.Assignment), htmlEscape(r.Settings.StoreLatency))
	for _, warning := range Warnings(r) {
		fmt.Fprintf(&b, "<div class=\"warn\">&#9888; %s</div>\n", htmlEscape(warning))
	}
	status := map[string]string{
		VerdictPass:         `<b class="ok">pass</b>`,
		VerdictFail:         `<b class="bad">fail</b>`,
		VerdictNoThresholds: `<b class="none">no thresholds set</b>`,
	}[r.Verdict()]
	b.WriteString(`<div class="group">Requests</div><div class="cards">`)
	card(&b, fmt.Sprint(r.Requests), "requests replayed")
	card(&b, fmt.Sprint(r.BadLines), "bad lines")
	cardTip(&b, fmt.Sprint(t.RequestsWouldDeny), "requests would be denied ("+pct(t.DenyRate)+" of requests)",
		"requests some rule was over its limit for, at any stage (each request counted once)")
	cardTip(&b, fmt.Sprint(t.RequestsDenied), "requests rejected at their stage",
		"requests some rule would have rejected given its stage: enforce, and canary on its share of gateways")
	fmt.Fprintf(&b, `<div class="card">%s<span>thresholds (--fail-if)</span></div>`, status)
	b.WriteString("</div>\n")
	b.WriteString(`<div class="group">Rule decisions <span class="muted">(summed over rules: a request two rules deny counts twice)</span></div><div class="cards">`)
	cardTip(&b, fmt.Sprint(t.WouldDeny), "would deny", meaning(legend, "Would deny"))
	cardTip(&b, fmt.Sprint(t.Denied), "denied given stages", meaning(legend, "Denied"))
	cardTip(&b, fmt.Sprint(t.IdealDeny), "ideal single bucket would deny", meaning(legend, "Ideal"))
	cardTip(&b, fmt.Sprintf("%d / %d", t.OverAdmission, t.UnderAdmission), "over / under admission",
		meaning(legend, "Over")+"; "+meaning(legend, "Under"))
	cardTip(&b, fmt.Sprint(t.FalsePositives), "false positives ("+pct(t.FalsePositiveRate)+" of would-deny)",
		meaning(legend, "Legit")+"; or "+meaning(legend, "NAT"))
	b.WriteString("</div>\n")
	for _, th := range r.Thresholds {
		cls, s := "ok", "ok"
		if th.Crossed {
			cls, s = "bad", "crossed"
		}
		fmt.Fprintf(&b, "<div>threshold <code>%s</code>: value %s: <span class=\"%s\">%s</span></div>\n", htmlEscape(th.Expr), th.shown(4), cls, s)
	}

	b.WriteString("<h2>Rules</h2>\n<table><tr>")
	for i, col := range []string{"Rule", "Stage", "Limit", "Requests", "Would deny", "Denied", "Ideal", "Over", "Under", "Stranded max", "Lease max", "Legit", "NAT"} {
		b.WriteString("<th")
		if i < 3 {
			b.WriteString(" class=l")
		}
		if tip := meaning(legend, col); tip != "" {
			fmt.Fprintf(&b, ` title="%s"`, htmlEscape(tip))
		}
		fmt.Fprintf(&b, ">%s</th>", col)
	}
	b.WriteString("</tr>\n")
	for _, rl := range r.Rules {
		fmt.Fprintf(&b, "<tr><td class=l><a href=\"#%s\"><code>%s/%s</code></a></td><td class=l>%s</td><td class=l>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>\n",
			anchor(rl), htmlEscape(rl.Domain), htmlEscape(rl.Rule), htmlEscape(rl.Stage), htmlEscape(rl.Limit), rl.Requests, rl.WouldDeny, rl.Denied, rl.IdealDeny,
			rl.OverAdmission, rl.UnderAdmission, rl.StrandedMax, rl.LeaseMax, rl.LegitDenials, rl.NATCollateral)
	}
	b.WriteString("</table>\n")
	writeHTMLLegend(&b, legend)

	for _, rl := range r.Rules {
		fmt.Fprintf(&b, "<h2 id=\"%s\"><code>%s/%s</code></h2>\n<div class=\"muted\">%s &middot; stage %s &middot; %d requests, %d would-deny, %d store calls</div>\n",
			anchor(rl), htmlEscape(rl.Domain), htmlEscape(rl.Rule), htmlEscape(rl.Pos), htmlEscape(rl.Stage), rl.Requests, rl.WouldDeny, rl.StoreCalls)
		s := rl.Series
		b.WriteString(`<div class="charts">`)
		// Ideal deny is a band under would deny: where leasing decides as the ideal bucket does,
		// the two coincide, and a line drawn over the other would hide it.
		b.WriteString(svgChart(chart{title: "Requests and denials per second", unit: "requests/s", each: "averaged over", rate: true,
			tip: chartTips[0], lines: []line{
				{"requests", "#0969da", s.Requests, solid}, {"ideal deny (band)", "#8250df", s.IdealDeny, band},
				{"would deny", "#cf222e", s.WouldDeny, solid}}}, s, r.EndMs))
		b.WriteString(svgChart(chart{title: "Largest lease batch", unit: "tokens", each: "the largest in", tip: chartTips[1],
			lines: []line{{"lease", "#1a7f37", s.Lease, solid}}}, s, r.EndMs))
		b.WriteString("</div>\n")
		if len(rl.TopDenied) > 0 {
			b.WriteString("<h3>Top denied identities</h3><table><tr><th class=l>Identity</th><th>Denials</th><th>Requests</th><th class=l>Note</th></tr>\n")
			for _, id := range rl.TopDenied {
				fmt.Fprintf(&b, "<tr><td class=l><code>%s</code></td><td>%d</td><td>%d</td><td class=l>%s</td></tr>\n", htmlEscape(id.Value), id.Denials, id.Requests, htmlEscape(note(id)))
			}
			b.WriteString("</table>\n")
		}
	}
	if r.BadLines > 0 {
		fmt.Fprintf(&b, "<h2>Bad lines</h2><p>%d lines skipped; the first %d:</p><pre>", r.BadLines, len(r.BadLineSamples))
		for _, bl := range r.BadLineSamples {
			fmt.Fprintf(&b, "%s:%d: %s\n    %s\n", htmlEscape(bl.File), bl.Line, htmlEscape(bl.Error), htmlEscape(bl.Text))
		}
		b.WriteString("</pre>\n")
	}
	b.WriteString("<p class=\"muted\">Generated by rlctl simulate. JWT claims in the replayed logs were decoded, not verified.</p>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func card(b *strings.Builder, value, label string) { cardTip(b, value, label, "") }

// cardTip writes a card whose tooltip, when tip is not empty, says what its figure means.
func cardTip(b *strings.Builder, value, label, tip string) {
	title := ""
	if tip != "" {
		title = ` title="` + htmlEscape(tip) + `"`
	}
	fmt.Fprintf(b, `<div class="card"%s><b>%s</b><span>%s</span></div>`, title, htmlEscape(value), htmlEscape(label))
}

// writeHTMLLegend writes the legend section: what each column and each chart means.
func writeHTMLLegend(b *strings.Builder, legend []Term) {
	b.WriteString("<h2 id=\"legend\">Legend</h2>\n<dl class=\"legend\">")
	for _, t := range slices.Concat(legend, chartTerms) {
		fmt.Fprintf(b, "<dt>%s</dt><dd>%s</dd>", htmlEscape(t.Name), htmlEscape(t.Meaning))
	}
	b.WriteString("</dl>\n")
}

func anchor(rl *Rule) string {
	return "rule-" + strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			return c
		}
		return '_'
	}, rl.Domain+"-"+rl.Rule)
}

func htmlEscape(s string) string { return html.EscapeString(s) }

// chart is one SVG chart of a rule's series.
type chart struct {
	title string
	tip   string // what the chart shows, as its tooltip
	unit  string // what the y axis measures
	// each says how a bucket makes its value, before "each 5 s bucket": "averaged over".
	each string
	// rate divides each bucket's count by the seconds of log it covers; otherwise a bucket's
	// value (a maximum, say) is drawn as it is.
	rate  bool
	lines []line
}

type line struct {
	name, color string
	values      []int64
	style       lineStyle
}

// lineStyle is how a line is stroked.
type lineStyle int

const (
	solid lineStyle = iota
	dashed
	// band is a wide, pale stroke, drawn before the lines that may coincide with it: a line
	// that runs on it stays visible inside it, and it stays visible around the line.
	band
)

// Band geometry: its width and opacity, and the radius of its dots.
const (
	bandWidth, bandOpacity = 7, 0.35
	bandDot                = 4.5
)

// stroke returns the SVG stroke attributes of l, at opacity times its own.
func (l line) stroke(opacity float64) string {
	width, dash := 1.5, ""
	switch l.style {
	case dashed:
		dash = ` stroke-dasharray="5 3"`
	case band:
		width, opacity = bandWidth, opacity*bandOpacity
	}
	op := ""
	if opacity < 1 {
		op = fmt.Sprintf(` stroke-opacity="%s"`, strconv.FormatFloat(opacity, 'f', -1, 64))
	}
	return fmt.Sprintf(`stroke="%s" stroke-width="%s"%s%s`, l.color, strconv.FormatFloat(width, 'f', -1, 64), op, dash)
}

// dot returns the attributes of a dot on l's buckets: a band's is larger and pale.
func (l line) dot() string {
	if l.style == band {
		return fmt.Sprintf(`r="%s" fill="%s" fill-opacity="%s"`, strconv.FormatFloat(bandDot, 'f', -1, 64), l.color,
			strconv.FormatFloat(bandOpacity, 'f', -1, 64))
	}
	return fmt.Sprintf(`r="2.5" fill="%s"`, l.color)
}

// maxMarkers is the most buckets a chart marks with a dot each: with few, a line alone is
// hard to see, and one bucket has no line at all.
const maxMarkers = 30

// minPartial is the least part of a bucket that a last, partial bucket must cover for its rate to
// be drawn: a few requests over a few milliseconds would make a spike.
const minPartial = 0.1

// point is one bucket as drawn, at the middle of the log time it covers.
type point struct {
	ms      float64
	v       float64
	partial bool // the bucket covers less than a whole bucket of log
}

// bucketSpans returns the milliseconds of log each of n buckets covers: the whole bucket but
// for the last, which ends with the log at endMs (inclusive).
func bucketSpans(startMs, bucketMs, endMs int64, n int) []int64 {
	spans := make([]int64, n)
	for i := range spans {
		spans[i] = bucketMs
	}
	if n > 0 {
		if c := endMs - (startMs + int64(n-1)*bucketMs) + 1; c > 0 && c < bucketMs {
			spans[n-1] = c
		}
	}
	return spans
}

// plot places a line's buckets, as per-second rates when rate is set. It leaves out a last,
// partial bucket too short to rate, unless it is the only one.
func plot(values []int64, startMs, bucketMs int64, spans []int64, rate bool) []point {
	pts := make([]point, 0, len(values))
	for i, v := range values {
		span := spans[i]
		p := point{ms: float64(startMs+int64(i)*bucketMs) + float64(span)/2, v: float64(v), partial: span < bucketMs}
		if rate {
			if p.partial && len(values) > 1 && float64(span) < minPartial*float64(bucketMs) {
				break
			}
			p.v = p.v * 1000 / float64(span)
		}
		pts = append(pts, p)
	}
	return pts
}

// Chart geometry in SVG pixels: the plot area is inset from the chart's edges by the margins.
const (
	chartW, chartH                                   = 560, 270
	marginLeft, marginRight, marginTop, marginBottom = 56, 12, 42, 62
	plotW, plotH                                     = chartW - marginLeft - marginRight, chartH - marginTop - marginBottom
)

// ticks is the number of intervals each axis is divided into by its ticks.
const ticks = 4

// frame maps log time and values onto the plot area: the x axis runs from the first bucket's
// start to the end of the log, the y axis from 0 to yMax.
type frame struct {
	startMs, spanMs int64
	yMax            float64
}

func (f frame) x(ms float64) float64 {
	return marginLeft + plotW*(ms-float64(f.startMs))/float64(f.spanMs)
}

func (f frame) y(v float64) float64 { return marginTop + plotH - plotH*v/f.yMax }

// svgChart draws c's lines over the time of series s, in a log ending at endMs, as an inline
// SVG with axes, grid, legend and notes on the bucket width and a partial last bucket.
func svgChart(c chart, s Series, endMs int64) string {
	spans, pts := chartPoints(c, s, endMs)
	var b strings.Builder
	writeChartHead(&b, c, s)
	if len(spans) == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="14" fill="#656d76">no data: the series has no time buckets</text></svg>`,
			marginLeft+plotW/2.0, marginTop+plotH/2.0)
		return b.String()
	}
	step := yStep(pts, c.rate)
	f := frame{startMs: s.StartMs, yMax: ticks * step}
	for _, sp := range spans {
		f.spanMs += sp
	}
	writeYTicks(&b, step)
	writeXTicks(&b, f)
	for i, l := range c.lines {
		writeLine(&b, f, l, pts[i])
	}
	writeLegend(&b, c.lines, pts)
	if note := partialNote(len(spans), spans, s.BucketMs, c.rate); note != "" {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#656d76">%s</text>`, marginLeft, chartH-9, htmlEscape(note))
	}
	b.WriteString("</svg>")
	return b.String()
}

// chartPoints returns the spans of the buckets c's lines have, none when s has no bucket
// width, and each line's points.
func chartPoints(c chart, s Series, endMs int64) ([]int64, [][]point) {
	pts := make([][]point, len(c.lines))
	if s.BucketMs <= 0 {
		return nil, pts
	}
	n := 0
	for _, l := range c.lines {
		n = max(n, len(l.values))
	}
	spans := bucketSpans(s.StartMs, s.BucketMs, endMs, n)
	if n > 0 {
		for i, l := range c.lines {
			pts[i] = plot(l.values, s.StartMs, s.BucketMs, spans, c.rate)
		}
	}
	return spans, pts
}

// writeChartHead opens the SVG and writes the title, what the values are, the y axis's unit
// and the x axis.
func writeChartHead(b *strings.Builder, c chart, s Series) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`,
		chartW, chartH, chartW, chartH)
	if c.tip != "" {
		fmt.Fprintf(b, `<title>%s</title>`, htmlEscape(c.tip))
	}
	fmt.Fprintf(b, `<text x="%d" y="16" font-size="13" font-weight="600" fill="#1f2328">%s</text>`, marginLeft, htmlEscape(c.title))
	sub := c.unit
	if s.BucketMs > 0 {
		sub = fmt.Sprintf("%s, %s each %s bucket", c.unit, c.each, secs(s.BucketMs))
	}
	fmt.Fprintf(b, `<text x="%d" y="31" fill="#656d76">%s</text>`, marginLeft, htmlEscape(sub))
	fmt.Fprintf(b, `<text transform="translate(12 %.1f) rotate(-90)" text-anchor="middle" fill="#656d76">%s</text>`,
		marginTop+plotH/2.0, htmlEscape(c.unit))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#8c959f"/>`, marginLeft, marginTop+plotH, chartW-marginRight, marginTop+plotH)
}

// yStep is the interval between the y axis's ticks: a round number, whole unless the values
// are rates, such that the top tick reaches the largest value.
func yStep(pts [][]point, rate bool) float64 {
	maxV := 0.0
	for _, lp := range pts {
		for _, p := range lp {
			maxV = max(maxV, p.v)
		}
	}
	step := niceCeil(maxV / ticks)
	if !rate {
		step = max(step, 1)
	}
	return step
}

// writeYTicks writes the grid lines and labels of the y axis.
func writeYTicks(b *strings.Builder, step float64) {
	for i := 0; i <= ticks; i++ {
		y := marginTop + plotH - plotH*float64(i)/ticks
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eaeef2"/>`, marginLeft, y, chartW-marginRight, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" fill="#656d76">%s</text>`, marginLeft-6, y+4, tickLabel(step*float64(i), step))
	}
}

// writeXTicks writes the times of the x axis's ticks, to the millisecond when they are that
// close together, with the date when they are days apart, and then the year when they span years.
func writeXTicks(b *strings.Builder, f frame) {
	layout := "15:04:05"
	switch tick := f.spanMs / ticks; {
	case tick < 100:
		layout = "15:04:05.000"
	case tick < 1000:
		layout = "15:04:05.0"
	case tick >= 86_400_000 && time.UnixMilli(f.startMs).UTC().Year() != time.UnixMilli(f.startMs+f.spanMs).UTC().Year():
		// Ticks days apart in a span across years: the month and day alone could repeat, and
		// the time of day left beside the year would make the labels overlap.
		layout = "Jan 2 2006"
	case f.spanMs > 86_400_000:
		layout = "Jan 2 15:04" // a span of days: the time of day alone would repeat
	}
	for i := 0; i <= ticks; i++ {
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case ticks:
			anchor = "end"
		}
		ms := f.startMs + f.spanMs*int64(i)/ticks
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#656d76">%s</text>`, f.x(float64(ms)), marginTop+plotH+16, anchor,
			time.UnixMilli(ms).UTC().Format(layout))
	}
}

// writeLine draws one line's points: a polyline through the whole buckets, a faded segment to
// a partial last bucket, a dot on each bucket when they are few, and a hollow dot on a partial
// last bucket.
func writeLine(b *strings.Builder, f frame, l line, lp []point) {
	if len(lp) == 0 {
		return
	}
	whole := lp
	if lp[len(lp)-1].partial {
		whole = lp[:len(lp)-1]
	}
	if len(whole) > 1 {
		var ps strings.Builder
		for _, p := range whole {
			fmt.Fprintf(&ps, "%.1f,%.1f ", f.x(p.ms), f.y(p.v))
		}
		fmt.Fprintf(b, `<polyline fill="none" %s stroke-linejoin="round" points="%s"/>`, l.stroke(1), strings.TrimSpace(ps.String()))
	}
	last := lp[len(lp)-1]
	if len(whole) < len(lp) && len(whole) > 0 {
		// The partial last bucket is drawn faded: a rate over less time is noisier, and a
		// maximum over less time is lower.
		p := whole[len(whole)-1]
		fmt.Fprintf(b, `<polyline fill="none" %s points="%.1f,%.1f %.1f,%.1f"/>`,
			l.stroke(0.4), f.x(p.ms), f.y(p.v), f.x(last.ms), f.y(last.v))
	}
	if len(lp) <= maxMarkers {
		for _, p := range whole {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" %s/>`, f.x(p.ms), f.y(p.v), l.dot())
		}
	}
	if len(whole) < len(lp) {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#fff" stroke="%s" stroke-width="2"/>`, f.x(last.ms), f.y(last.v), l.color)
	}
}

// writeLegend writes a swatch, stroked as the line is, and the name of each line, saying which
// have no data.
func writeLegend(b *strings.Builder, lines []line, pts [][]point) {
	x := marginLeft
	for i, l := range lines {
		name := l.name
		if len(pts[i]) == 0 {
			name += " (no data)"
		}
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" %s/><text x="%d" y="%d" fill="#1f2328">%s</text>`,
			x, chartH-31, x+18, chartH-31, l.stroke(1), x+22, chartH-27, htmlEscape(name))
		x += 32 + 7*len(name)
	}
}

// partialNote says how a chart drew a last bucket that covers only part of its width.
func partialNote(n int, spans []int64, bucketMs int64, rate bool) string {
	if n == 0 || spans[n-1] == bucketMs {
		return ""
	}
	last := spans[n-1]
	switch {
	case n == 1:
		return fmt.Sprintf("one bucket (hollow dot): the log covers %s of it", secs(last))
	case rate && float64(last) < minPartial*float64(bucketMs):
		return fmt.Sprintf("the last %s of the log, a partial bucket, is too short to rate and not drawn", secs(last))
	}
	return fmt.Sprintf("faded, hollow dot: the last bucket covers only %s of %s", secs(last), secs(bucketMs))
}

// secs formats milliseconds as seconds: "5 s", "0.25 s".
func secs(ms int64) string {
	return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + " s"
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 when v is not positive).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow10(int(math.Floor(math.Log10(v))))
	for _, m := range []float64{1, 2, 5, 10} {
		// Allow for the rounding in p, so that 0.3 gives 0.5, not 1.
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// tickLabel formats an axis tick v, a multiple of step: 2.5k, 1M, 0.25. It shows the decimals
// that step needs, so that distinct ticks have distinct labels however small the step.
func tickLabel(v, step float64) string {
	scale, unit := 1.0, ""
	switch {
	case v >= 1e6:
		scale, unit = 1e6, "M"
	case v >= 1e3:
		scale, unit = 1e3, "k"
	}
	s := strconv.FormatFloat(v/scale, 'f', decimals(step/scale), 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + unit
}

// decimals returns the fewest decimals that write step, up to rounding error.
func decimals(step float64) int {
	const most = 15
	for d := 0; d < most; d++ {
		x := step * math.Pow10(d)
		if math.Abs(x-math.Round(x)) <= 1e-6*x {
			return d
		}
	}
	return most
}
