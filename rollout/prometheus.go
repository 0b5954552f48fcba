package rollout

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/rlctl/rlctl/policy"
)

// Prometheus reads the enforcers' rate_limit_requests_total through the Prometheus HTTP API
// (/api/v1/query), with the metric, labels and decisions of render's RateLimitRuleWouldDeny
// alert: the would-deny share is the increase of the rule's shadow_over and soft_over decisions
// (and over_limit too in canary, where the canary share enforces) over all its decisions.
type Prometheus struct {
	api promv1.API
	// Now is the query's evaluation time; nil means the wall clock.
	Now func() time.Time
}

// NewPrometheus returns a client of the Prometheus server at url. rt carries the requests; nil
// means http.DefaultTransport.
func NewPrometheus(url string, rt http.RoundTripper) (*Prometheus, error) {
	c, err := api.NewClient(api.Config{Address: url, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("--prometheus-url %s: %w", url, err)
	}
	return &Prometheus{api: promv1.NewAPI(c)}, nil
}

// WouldDenyQueries returns the PromQL of the over-limit decisions and of all decisions of one
// rule over window.
func WouldDenyQueries(domain, rule string, stage policy.StageName, window time.Duration) (over, total string) {
	sel := "domain=" + strconv.Quote(domain) + ", rule=" + strconv.Quote(rule)
	decisions := "shadow_over|soft_over"
	if stage == policy.StageCanary {
		decisions += "|over_limit"
	}
	r := model.Duration(window).String()
	over = "sum(increase(rate_limit_requests_total{" + sel + `, decision=~"` + decisions + `"}[` + r + "]))"
	total = "sum(increase(rate_limit_requests_total{" + sel + "}[" + r + "]))"
	return over, total
}

// WouldDeny implements WouldDenySource. A rule without any series has total 0.
func (p *Prometheus) WouldDeny(ctx context.Context, domain, rule string, stage policy.StageName, window time.Duration) (over, total float64, err error) {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	qo, qt := WouldDenyQueries(domain, rule, stage, window)
	if total, err = p.scalar(ctx, qt, now); err != nil || total == 0 {
		return 0, total, err
	}
	over, err = p.scalar(ctx, qo, now)
	return over, total, err
}

// scalar runs q, a sum, and returns its one value, or 0 when the result is empty.
func (p *Prometheus) scalar(ctx context.Context, q string, at time.Time) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, _, _, err := p.api.Query(ctx, q, at)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return 0, fmt.Errorf("%s: got a %s, want a vector", q, v.Type())
	}
	if len(vec) == 0 {
		return 0, nil
	}
	return float64(vec[0].Value), nil
}
