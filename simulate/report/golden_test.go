package report

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
)

// goldenReport is a small, fixed report: an enforced rule whose leased gateways deny exactly
// when the ideal bucket does in most buckets, and a shadow rule that denies nothing.
func goldenReport() *Report {
	const start = 1714564800000
	r := &Report{Policies: "policies", Logs: []string{"access.log"}, Requests: 1200, BadLines: 1,
		BadLineSamples: []BadLine{{File: "access.log", Line: 17, Error: "malformed JSON", Text: `{"start_time":`}},
		StartMs:        start, EndMs: start + 5999,
		Settings: Settings{Gateways: 4, Assignment: "round-robin", StoreLatency: "1ms", NATUsers: 20, BucketMs: 1000},
		Totals:   Totals{Matched: 1100, RequestsWouldDeny: 90, RequestsDenied: 90, RequestsWithUser: 1000}}
	r.Rules = []*Rule{{
		Domain: "edge", Rule: "per-tenant", Stage: "enforce", Pos: "policies/edge.cue:12:3", Limit: "100/1s burst 100",
		Counts: Counts{Requests: 700, WouldDeny: 90, Denied: 90, IdealDeny: 88, OverAdmission: 1, UnderAdmission: 3,
			FalsePositives: 12, LegitDenials: 10, NATCollateral: 2},
		StrandedMax: 40, StrandedEnd: 12, LeaseMax: 25, StoreCalls: 60,
		TopDenied: []Identity{{Value: "tenant=acme", Denials: 80, Requests: 400, Legit: true, LegitDenials: 10},
			{Value: "198.51.100.23", Denials: 10, Requests: 120, Users: 30}},
		Series: Series{StartMs: start, BucketMs: 1000, Requests: []int64{100, 150, 150, 100, 100, 100},
			WouldDeny: []int64{0, 40, 40, 10, 0, 0}, IdealDeny: []int64{0, 40, 38, 10, 0, 0}, Lease: []int64{10, 25, 25, 20, 10, 10}},
	}, {
		Domain: "edge", Rule: "per-ip", Stage: "shadow", Pos: "policies/edge.cue:30:3", Limit: "1000/1m",
		Counts:   Counts{Requests: 400},
		LeaseMax: 5, StoreCalls: 80,
		Series: Series{StartMs: start, BucketMs: 1000, Requests: []int64{60, 70, 70, 70, 70, 60},
			WouldDeny: []int64{0, 0, 0, 0, 0, 0}, IdealDeny: []int64{0, 0, 0, 0, 0, 0}, Lease: []int64{5, 5, 5, 5, 5, 5}},
	}}
	r.Finish()
	return r
}

// TestGolden renders the golden report in every format, without thresholds and with one that
// holds and one that is crossed. Run go test -update and review the diff after a change.
func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name       string
		thresholds []Threshold
	}{
		{"no-thresholds", nil},
		{"crossed", []Threshold{{Expr: "false_positive_rate>5%", Value: 12.0 / 90, Crossed: true},
			{Expr: "over_admission<10", Value: 1}}},
	} {
		for _, format := range []string{"table", "json", "markdown", "html"} {
			t.Run(tt.name+"/"+format, func(t *testing.T) {
				r := goldenReport()
				r.Thresholds = append(r.Thresholds, tt.thresholds...)
				for _, th := range tt.thresholds {
					r.Failed = r.Failed || th.Crossed
				}
				var b bytes.Buffer
				if err := Write(&b, r, format); err != nil {
					t.Fatal(err)
				}
				ext := map[string]string{"table": "txt", "json": "json", "markdown": "md", "html": "html"}[format]
				golden.Check(t, filepath.Join("testdata", tt.name+"."+ext), b.Bytes())
			})
		}
	}
}
