package report

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// WriteHTML writes r as one self-contained HTML page: inline CSS and inline SVG charts of each
// rule's request and denial rates over time and of its lease size. It loads nothing from anywhere.
func WriteHTML(w io.Writer, r *Report) error {
	var b strings.Builder
	t := r.Totals
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
.bad{color:#cf222e} .ok{color:#1a7f37}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right}
th{background:#f6f8fa} td.l,th.l{text-align:left} code{font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:16px} svg{background:#fff;border:1px solid #eaeef2;border-radius:4px}
pre{background:#f6f8fa;padding:8px;font-size:12px;overflow-x:auto}
</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>rlctl simulate</h1>\n<div class=\"muted\">policies <code>%s</code> &middot; logs <code>%s</code> &middot; %s &middot; %d gateways (%s) &middot; store latency %s</div>\n",
		esc(r.Policies), esc(strings.Join(r.Logs, ", ")), esc(window(r)), r.Settings.Gateways, esc(r.Settings.Assignment), esc(r.Settings.StoreLatency))
	if r.AssignMissing > 0 {
		fmt.Fprintf(&b, "<div class=\"warn\">&#9888; %d records (%s) lack the field of <code>--assign %s</code>; %s.</div>\n", r.AssignMissing,
			pct(ratio(r.AssignMissing, r.Requests)), esc(r.Settings.Assignment), esc(missingGoes(r.Settings.Assignment)))
	}
	if r.Reordered > 0 {
		fmt.Fprintf(&b, "<div class=\"warn\">&#9888; %d records were logged before an earlier one of their log; they were replayed at the later time.</div>\n", r.Reordered)
	}
	status := `<b class="ok">pass</b>`
	if r.Failed {
		status = `<b class="bad">fail</b>`
	}
	b.WriteString(`<div class="group">Requests</div><div class="cards">`)
	card(&b, fmt.Sprint(r.Requests), "requests replayed")
	card(&b, fmt.Sprint(r.BadLines), "bad lines")
	card(&b, fmt.Sprint(t.RequestsWouldDeny), "requests would be denied ("+pct(t.DenyRate)+" of requests)")
	card(&b, fmt.Sprint(t.RequestsDenied), "requests rejected at their stage")
	fmt.Fprintf(&b, `<div class="card">%s<span>thresholds</span></div>`, status)
	b.WriteString("</div>\n")
	b.WriteString(`<div class="group">Rule decisions <span class="muted">(summed over rules: a request two rules deny counts twice)</span></div><div class="cards">`)
	card(&b, fmt.Sprint(t.WouldDeny), "would deny")
	card(&b, fmt.Sprint(t.Denied), "denied given stages")
	card(&b, fmt.Sprint(t.IdealDeny), "ideal single bucket would deny")
	card(&b, fmt.Sprintf("%d / %d", t.OverAdmission, t.UnderAdmission), "over / under admission")
	card(&b, fmt.Sprint(t.FalsePositives), "false positives ("+pct(t.FalsePositiveRate)+" of would-deny)")
	b.WriteString("</div>\n")
	for _, th := range r.Thresholds {
		cls, s := "ok", "ok"
		if th.Crossed {
			cls, s = "bad", "crossed"
		}
		fmt.Fprintf(&b, "<div>threshold <code>%s</code>: value %.4g: <span class=\"%s\">%s</span></div>\n", esc(th.Expr), th.Value, cls, s)
	}

	b.WriteString("<h2>Rules</h2>\n<table><tr><th class=l>Rule</th><th class=l>Stage</th><th class=l>Limit</th><th>Requests</th><th>Would deny</th><th>Ideal</th><th>Over</th><th>Under</th><th>Stranded max</th><th>Lease max</th><th>Legit</th><th>NAT</th></tr>\n")
	for _, rl := range r.Rules {
		fmt.Fprintf(&b, "<tr><td class=l><a href=\"#%s\"><code>%s/%s</code></a></td><td class=l>%s</td><td class=l>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>\n",
			anchor(rl), esc(rl.Domain), esc(rl.Rule), esc(rl.Stage), esc(rl.Limit), rl.Requests, rl.WouldDeny, rl.IdealDeny,
			rl.OverAdmission, rl.UnderAdmission, rl.StrandedMax, rl.LeaseMax, rl.LegitDenials, rl.NATCollateral)
	}
	b.WriteString("</table>\n")

	for _, rl := range r.Rules {
		fmt.Fprintf(&b, "<h2 id=\"%s\"><code>%s/%s</code></h2>\n<div class=\"muted\">%s &middot; stage %s &middot; %d requests, %d would-deny, %d store calls</div>\n",
			anchor(rl), esc(rl.Domain), esc(rl.Rule), esc(rl.Pos), esc(rl.Stage), rl.Requests, rl.WouldDeny, rl.StoreCalls)
		s := rl.Series
		b.WriteString(`<div class="charts">`)
		b.WriteString(svgChart(chart{title: "Requests and denials per second", unit: "requests/s", each: "averaged over", rate: true, lines: []line{
			{"requests", "#0969da", s.Requests, false}, {"ideal deny", "#8250df", s.IdealDeny, false},
			{"would deny", "#cf222e", s.WouldDeny, true}}}, s, r.EndMs))
		b.WriteString(svgChart(chart{title: "Largest lease batch", unit: "tokens", each: "the largest in", lines: []line{{"lease", "#1a7f37", s.Lease, false}}}, s, r.EndMs))
		b.WriteString("</div>\n")
		if len(rl.TopDenied) > 0 {
			b.WriteString("<h3>Top denied identities</h3><table><tr><th class=l>Identity</th><th>Denials</th><th>Requests</th><th class=l>Note</th></tr>\n")
			for _, id := range rl.TopDenied {
				fmt.Fprintf(&b, "<tr><td class=l><code>%s</code></td><td>%d</td><td>%d</td><td class=l>%s</td></tr>\n", esc(id.Value), id.Denials, id.Requests, esc(note(id)))
			}
			b.WriteString("</table>\n")
		}
	}
	if r.BadLines > 0 {
		fmt.Fprintf(&b, "<h2>Bad lines</h2><p>%d lines skipped; the first %d:</p><pre>", r.BadLines, len(r.BadLineSamples))
		for _, bl := range r.BadLineSamples {
			fmt.Fprintf(&b, "%s:%d: %s\n    %s\n", esc(bl.File), bl.Line, esc(bl.Error), esc(bl.Text))
		}
		b.WriteString("</pre>\n")
	}
	b.WriteString("<p class=\"muted\">Generated by rlctl simulate. JWT claims in the replayed logs were decoded, not verified.</p>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func card(b *strings.Builder, value, label string) {
	fmt.Fprintf(b, `<div class="card"><b>%s</b><span>%s</span></div>`, esc(value), esc(label))
}

func anchor(rl *Rule) string {
	return "rule-" + strings.Map(func(c rune) rune {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			return c
		}
		return '_'
	}, rl.Domain+"-"+rl.Rule)
}

func esc(s string) string { return html.EscapeString(s) }

func htmlEscape(s string) string { return html.EscapeString(s) }

// chart is one SVG chart of a rule's series.
type chart struct {
	title string
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
	dashed      bool
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

// svgChart draws c's lines over the time of series s, in a log ending at endMs, as an inline
// SVG with axes, grid, legend and notes on the bucket width and a partial last bucket.
func svgChart(c chart, s Series, endMs int64) string {
	const W, H, left, right, top, bottom = 560, 270, 56, 12, 42, 62
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	n := 0
	for _, l := range c.lines {
		n = max(n, len(l.values))
	}
	var spans []int64
	if s.BucketMs > 0 {
		spans = bucketSpans(s.StartMs, s.BucketMs, endMs, n)
	} else {
		n = 0
	}
	pts := make([][]point, len(c.lines))
	maxV := 0.0
	for i, l := range c.lines {
		if n > 0 {
			pts[i] = plot(l.values, s.StartMs, s.BucketMs, spans, c.rate)
		}
		for _, p := range pts[i] {
			maxV = max(maxV, p.v)
		}
	}
	step := niceCeil(maxV / 4)
	if !c.rate {
		step = max(step, 1)
	}
	yMax := 4 * step

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, W, H, W, H)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="600" fill="#1f2328">%s</text>`, left, esc(c.title))
	sub := c.unit
	if s.BucketMs > 0 {
		sub = fmt.Sprintf("%s, %s each %s bucket", c.unit, c.each, secs(s.BucketMs))
	}
	fmt.Fprintf(&b, `<text x="%d" y="31" fill="#656d76">%s</text>`, left, esc(sub))
	fmt.Fprintf(&b, `<text transform="translate(12 %.1f) rotate(-90)" text-anchor="middle" fill="#656d76">%s</text>`, float64(top)+ph/2, esc(c.unit))
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#8c959f"/>`, left, top+int(ph), W-right, top+int(ph))
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="14" fill="#656d76">no data: the series has no time buckets</text></svg>`,
			float64(left)+pw/2, float64(top)+ph/2)
		return b.String()
	}
	for i := 0; i <= 4; i++ {
		y := float64(top) + ph - ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eaeef2"/>`, left, y, W-right, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#656d76">%s</text>`, left-6, y+4, short(step*float64(i)))
	}
	// The x axis runs from the first bucket's start to the end of the log.
	var spanMs int64
	for _, sp := range spans {
		spanMs += sp
	}
	x := func(ms float64) float64 { return float64(left) + pw*(ms-float64(s.StartMs))/float64(spanMs) }
	y := func(v float64) float64 { return float64(top) + ph - ph*v/yMax }
	layout := "15:04:05"
	switch tick := spanMs / 4; {
	case tick < 100:
		layout = "15:04:05.000"
	case tick < 1000:
		layout = "15:04:05.0"
	}
	for i := 0; i <= 4; i++ {
		anchor := "middle"
		switch i {
		case 0:
			anchor = "start"
		case 4:
			anchor = "end"
		}
		ms := s.StartMs + spanMs*int64(i)/4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#656d76">%s</text>`, x(float64(ms)), top+int(ph)+16, anchor,
			time.UnixMilli(ms).UTC().Format(layout))
	}

	for i, l := range c.lines {
		lp := pts[i]
		if len(lp) == 0 {
			continue
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		whole := lp
		if lp[len(lp)-1].partial {
			whole = lp[:len(lp)-1]
		}
		var ps strings.Builder
		for _, p := range whole {
			fmt.Fprintf(&ps, "%.1f,%.1f ", x(p.ms), y(p.v))
		}
		if len(whole) > 1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`, l.color, dash, strings.TrimSpace(ps.String()))
		}
		if len(whole) < len(lp) && len(whole) > 0 {
			// The partial last bucket is drawn faded: a rate over less time is noisier, and a
			// maximum over less time is lower.
			p, q := whole[len(whole)-1], lp[len(lp)-1]
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-opacity="0.4"%s points="%.1f,%.1f %.1f,%.1f"/>`,
				l.color, dash, x(p.ms), y(p.v), x(q.ms), y(q.v))
		}
		if len(lp) <= maxMarkers {
			for _, p := range whole {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`, x(p.ms), y(p.v), l.color)
			}
		}
		if len(whole) < len(lp) {
			q := lp[len(lp)-1]
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="#fff" stroke="%s" stroke-width="2"/>`, x(q.ms), y(q.v), l.color)
		}
	}
	lx := left
	for i, l := range c.lines {
		name := l.name
		if len(pts[i]) == 0 {
			name += " (no data)"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" fill="#1f2328">%s</text>`,
			lx, H-36, l.color, lx+14, H-27, esc(name))
		lx += 24 + 7*len(name)
	}
	if note := partialNote(n, spans, s.BucketMs, c.rate); note != "" {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#656d76">%s</text>`, left, H-9, esc(note))
	}
	b.WriteString("</svg>")
	return b.String()
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

// short formats an axis value: 2.5k, 1M, 0.25.
func short(v float64) string {
	unit := ""
	switch {
	case v >= 1e6:
		v, unit = v/1e6, "M"
	case v >= 1e3:
		v, unit = v/1e3, "k"
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64) + unit
}
