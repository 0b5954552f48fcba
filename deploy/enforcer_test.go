package deploy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// exportedMetric is a metric family a running enforcer exports.
type exportedMetric struct {
	histogram bool
	labels    []string // the label names its series carry
}

// spawnEnforcer starts a real enforcer on the snapshot at snapshotPath, writing m there first
// unless m is nil: memory store, free loopback ports, logs discarded. It is closed when t ends.
func spawnEnforcer(t *testing.T, snapshotPath string, m *policy.Model) *enforcer.Enforcer {
	t.Helper()
	if m != nil {
		writeSnapshot(t, snapshotPath, m)
	}
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{
		SnapshotPath: snapshotPath, GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		InstanceID: "deploy-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func writeSnapshot(t *testing.T, path string, m *policy.Model) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.WriteSnapshot(f, m); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// enforcerMetrics starts an enforcer on the example policies and scrapes its /metrics once:
// the metric families it exports, from its registry. Every series a dashboard reads exists
// before the first request, since the enforcer starts its known series at 0.
func enforcerMetrics(t *testing.T) map[string]exportedMetric {
	t.Helper()
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	e := spawnEnforcer(t, filepath.Join(t.TempDir(), "snapshot.json"), m)
	resp, err := http.Get("http://" + e.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]exportedMetric{}
	for name, fam := range families {
		em := exportedMetric{histogram: fam.GetType() == dto.MetricType_HISTOGRAM}
		for _, mt := range fam.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !slices.Contains(em.labels, l.GetName()) {
					em.labels = append(em.labels, l.GetName())
				}
			}
		}
		out[name] = em
	}
	return out
}
