package simulate

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/rlctl/rlctl/simulate/report"
)

// Threshold is a parsed --fail-if expression: METRIC OP VALUE, such as
// "false_positive_rate>0.5%" or "would_deny>=1000".
type Threshold struct {
	Expr   string
	Metric string
	Op     string
	Value  float64
}

// Metrics are the names a threshold may test, with how each is read from a report. Rates are
// fractions; a value written with '%' is divided by 100.
var Metrics = map[string]func(*report.Report) float64{
	"false_positive_rate": func(r *report.Report) float64 { return r.Totals.FalsePositiveRate },
	"false_positives":     func(r *report.Report) float64 { return float64(r.Totals.FalsePositives) },
	"legit_denials":       func(r *report.Report) float64 { return float64(r.Totals.LegitDenials) },
	"nat_collateral":      func(r *report.Report) float64 { return float64(r.Totals.NATCollateral) },
	"would_deny":          func(r *report.Report) float64 { return float64(r.Totals.WouldDeny) },
	"deny_rate":           func(r *report.Report) float64 { return r.Totals.DenyRate },
	"requests_would_deny": func(r *report.Report) float64 { return float64(r.Totals.RequestsWouldDeny) },
	"requests_denied":     func(r *report.Report) float64 { return float64(r.Totals.RequestsDenied) },
	"denied":              func(r *report.Report) float64 { return float64(r.Totals.Denied) },
	"ideal_deny":          func(r *report.Report) float64 { return float64(r.Totals.IdealDeny) },
	"over_admission":      func(r *report.Report) float64 { return float64(r.Totals.OverAdmission) },
	"under_admission":     func(r *report.Report) float64 { return float64(r.Totals.UnderAdmission) },
	"over_admission_rate": func(r *report.Report) float64 { return ratio(r.Totals.OverAdmission, r.Totals.Decisions) },
	"bad_lines":           func(r *report.Report) float64 { return float64(r.BadLines) },
	"requests":            func(r *report.Report) float64 { return float64(r.Requests) },
}

// MetricNames lists Metrics sorted, for help and errors.
func MetricNames() []string {
	names := make([]string, 0, len(Metrics))
	for n := range Metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// rateMetrics lists the metrics that are shares from 0 to 1, which a value may give in percent.
func rateMetrics() []string {
	var out []string
	for _, n := range MetricNames() {
		if strings.HasSuffix(n, "_rate") {
			out = append(out, n)
		}
	}
	return out
}

var ops = []string{">=", "<=", "==", "!=", ">", "<"}

// ParseThreshold parses METRIC OP VALUE with OP one of > >= < <= == != and VALUE a number,
// ending in '%' only for a rate (a metric whose name ends in _rate).
func ParseThreshold(s string) (Threshold, error) {
	expr := strings.ReplaceAll(s, " ", "")
	for _, op := range ops {
		i := strings.Index(expr, op)
		if i < 0 {
			continue
		}
		metric, val := expr[:i], expr[i+len(op):]
		if _, ok := Metrics[metric]; !ok {
			return Threshold{}, fmt.Errorf("--fail-if %q: unknown metric %q (want one of %s)", s, metric, strings.Join(MetricNames(), ", "))
		}
		num, percent := strings.CutSuffix(val, "%")
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return Threshold{}, fmt.Errorf("--fail-if %q: value %q is not a finite number", s, val)
		}
		rate := strings.HasSuffix(metric, "_rate")
		if percent && !rate {
			// denied>5% read as denied>0.05, crossed by one request: a count is no share.
			return Threshold{}, fmt.Errorf("--fail-if %q: %s is a count, not a share: drop the %%, or test a rate (%s)",
				s, metric, strings.Join(rateMetrics(), ", "))
		}
		if percent {
			// Divided, not multiplied by 0.01: 35 × 0.01 is 0.35000000000000003, above the
			// 0.35 of 35 requests in 100, and deny_rate>=35% would not be crossed there.
			v /= 100
		}
		if rate && (v < 0 || v > 1) {
			return Threshold{}, fmt.Errorf("--fail-if %q: %s", s, outOfShare(metric, op, num, percent))
		}
		return Threshold{Expr: s, Metric: metric, Op: op, Value: v}, nil
	}
	return Threshold{}, fmt.Errorf("--fail-if %q: want METRIC OP VALUE, such as false_positive_rate>0.5%%", s)
}

// outOfShare says why a rate's value, num (and '%' when percent), is outside the share from 0 to
// 1 it is compared with, where the check could not behave as meant. A number from 1 to 100
// without '%' was meant as a percentage (deny_rate>20 as 20%): it says how to write one.
func outOfShare(metric, op, num string, percent bool) string {
	v, _ := strconv.ParseFloat(num, 64)
	switch {
	case percent:
		return fmt.Sprintf("%s is a share from 0%% to 100%%: %s%% is outside it", metric, num)
	case v > 1 && v <= 100:
		return fmt.Sprintf("%s is a share from 0 to 1: write %s%s%s%% for a percentage", metric, metric, op, num)
	}
	return fmt.Sprintf("%s is a share from 0 to 1 (0%% to 100%%): %s is outside it", metric, num)
}

// Evaluate tests the thresholds against r, records them in r.Thresholds and sets r.Failed when
// any is crossed.
func Evaluate(r *report.Report, ths []Threshold) {
	r.Thresholds = r.Thresholds[:0]
	for _, th := range ths {
		v := Metrics[th.Metric](r)
		var crossed bool
		switch th.Op {
		case ">":
			crossed = v > th.Value
		case ">=":
			crossed = v >= th.Value
		case "<":
			crossed = v < th.Value
		case "<=":
			crossed = v <= th.Value
		case "==":
			crossed = v == th.Value
		case "!=":
			crossed = v != th.Value
		}
		r.Thresholds = append(r.Thresholds, report.Threshold{Expr: th.Expr, Value: v, Crossed: crossed})
		r.Failed = r.Failed || crossed
	}
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
