package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

// WriteHTML writes r as one self-contained HTML page: inline CSS and inline SVG charts of each
// rule's requests and denials over time and of its lease size. It loads nothing from anywhere.
func WriteHTML(w io.Writer, r *Report) error {
	var b strings.Builder
	t := r.Totals
	b.WriteString(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>rlctl simulate report</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#1f2328;padding:0 16px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px} .muted{color:#656d76;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px} .card span{font-size:12px;color:#656d76}
.bad{color:#cf222e} .ok{color:#1a7f37}
table{border-collapse:collapse;font-size:13px;margin:8px 0} th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:right}
th{background:#f6f8fa} td.l,th.l{text-align:left} code{font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:16px} svg{background:#fff;border:1px solid #eaeef2;border-radius:4px}
pre{background:#f6f8fa;padding:8px;font-size:12px;overflow-x:auto}
</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>rlctl simulate</h1>\n<div class=\"muted\">policies <code>%s</code> &middot; logs <code>%s</code> &middot; %s &middot; %d gateways (%s) &middot; store latency %s</div>\n",
		esc(r.Policies), esc(strings.Join(r.Logs, ", ")), esc(window(r)), r.Settings.Gateways, esc(r.Settings.Assignment), esc(r.Settings.StoreLatency))
	status := `<b class="ok">pass</b>`
	if r.Failed {
		status = `<b class="bad">fail</b>`
	}
	b.WriteString(`<div class="cards">`)
	card(&b, fmt.Sprint(r.Requests), "requests")
	card(&b, fmt.Sprint(r.BadLines), "bad lines")
	card(&b, fmt.Sprintf("%d", t.WouldDeny), "would deny ("+pct(t.DenyRate)+")")
	card(&b, fmt.Sprintf("%d", t.IdealDeny), "ideal single bucket")
	card(&b, fmt.Sprintf("%d / %d", t.OverAdmission, t.UnderAdmission), "over / under admission")
	card(&b, fmt.Sprintf("%d", t.FalsePositives), "false positives ("+pct(t.FalsePositiveRate)+")")
	fmt.Fprintf(&b, `<div class="card">%s<span>thresholds</span></div>`, status)
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
		b.WriteString(svgChart("Requests and denials per bucket", s.StartMs, s.BucketMs, []line{
			{"requests", "#0969da", s.Requests, false}, {"ideal deny", "#8250df", s.IdealDeny, false},
			{"would deny", "#cf222e", s.WouldDeny, true}}))
		b.WriteString(svgChart("Largest lease batch (tokens)", s.StartMs, s.BucketMs, []line{{"lease", "#1a7f37", s.Lease, false}}))
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

type line struct {
	name, color string
	values      []int64
	dashed      bool
}

// svgChart draws lines over time as an inline SVG with axes, grid and a legend.
func svgChart(title string, startMs, bucketMs int64, lines []line) string {
	const W, H, left, right, top, bottom = 560, 240, 56, 12, 28, 40
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	n := 0
	var maxV int64
	for _, l := range lines {
		n = max(n, len(l.values))
		for _, v := range l.values {
			maxV = max(maxV, v)
		}
	}
	step := niceCeil((maxV + 3) / 4)
	yMax := 4 * step
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, W, H, W, H)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="600" fill="#1f2328">%s</text>`, left, esc(title))
	for i := 0; i <= 4; i++ {
		y := float64(top) + ph - ph*float64(i)/4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eaeef2"/>`, left, y, W-right, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#656d76">%s</text>`, left-6, y+4, short(step*int64(i)))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#8c959f"/>`, left, top+int(ph), W-right, top+int(ph))
	if n > 0 && bucketMs > 0 {
		for i := 0; i <= 4; i++ {
			x := float64(left) + pw*float64(i)/4
			ms := startMs + int64(float64(n)*float64(bucketMs)*float64(i)/4)
			anchor := "middle"
			switch i {
			case 0:
				anchor = "start"
			case 4:
				anchor = "end"
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#656d76">%s</text>`, x, top+int(ph)+16, anchor,
				time.UnixMilli(ms).UTC().Format("15:04:05"))
		}
	}
	for _, l := range lines {
		if len(l.values) == 0 {
			continue
		}
		var pts strings.Builder
		for i, v := range l.values {
			x := float64(left) + pw*(float64(i)+0.5)/float64(max(n, 1))
			y := float64(top) + ph - ph*float64(v)/float64(yMax)
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		}
		dash := ""
		if l.dashed {
			dash = ` stroke-dasharray="5 3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>`, l.color, dash, strings.TrimSpace(pts.String()))
	}
	x := left
	for _, l := range lines {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d" fill="#1f2328">%s</text>`,
			x, H-14, l.color, x+14, H-5, esc(l.name))
		x += 24 + 7*len(l.name)
	}
	if n == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#656d76">no data</text>`, W/2, H/2)
	}
	b.WriteString("</svg>")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (at least 1).
func niceCeil(v int64) int64 {
	if v <= 1 {
		return 1
	}
	p := int64(1)
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func short(v int64) string {
	switch {
	case v >= 1_000_000 && v%100_000 == 0:
		return fmt.Sprintf("%gM", float64(v)/1e6)
	case v >= 1000 && v%100 == 0:
		return fmt.Sprintf("%gk", float64(v)/1e3)
	}
	return fmt.Sprint(v)
}
