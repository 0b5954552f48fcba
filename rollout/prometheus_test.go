package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/policy"
)

// TestPrometheusWouldDeny answers /api/v1/query as Prometheus documents it and checks the
// queries sent: the alert's metric, labels and decisions, over the window given.
func TestPrometheusWouldDeny(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		q := r.Form.Get("query")
		queries = append(queries, q)
		v := "1000"
		if strings.Contains(q, "decision=~") {
			v = "4"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1749686400,%q]}]}}`, v)
	}))
	defer srv.Close()
	p, err := NewPrometheus(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Now = func() time.Time { return time.Unix(1749686400, 0) }
	over, total, err := p.WouldDeny(context.Background(), "edge", "developer_pro", policy.StageShadow, 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if over != 4 || total != 1000 {
		t.Errorf("got %v of %v, want 4 of 1000", over, total)
	}
	want := []string{
		`sum(increase(rate_limit_requests_total{domain="edge", rule="developer_pro"}[1w]))`,
		`sum(increase(rate_limit_requests_total{domain="edge", rule="developer_pro", decision=~"shadow_over|soft_over"}[1w]))`,
	}
	if strings.Join(queries, "\n") != strings.Join(want, "\n") {
		t.Errorf("queries:\n%s\nwant\n%s", strings.Join(queries, "\n"), strings.Join(want, "\n"))
	}
	if o, _ := WouldDenyQueries("edge", "r", policy.StageCanary, 24*time.Hour); !strings.Contains(o, `decision=~"shadow_over|soft_over|over_limit"}[1d]`) {
		t.Errorf("canary query: %s", o)
	}
}
