package docgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/pflag"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// EnforcerPage is rlctl-enforcer's reference page: its --help, which holds the usage, the
// environment twins, the signals, the exit codes and every flag with its default.
func EnforcerPage() ([]byte, error) {
	var help bytes.Buffer
	_, err := enforcer.ParseArgs([]string{"--help"}, func(string) string { return "" }, &help)
	if !errors.Is(err, pflag.ErrHelp) {
		return nil, fmt.Errorf("docgen: rlctl-enforcer --help: %v", err)
	}
	var b bytes.Buffer
	b.WriteString("## rlctl-enforcer\n\n")
	b.WriteString("The rate-limit sidecar: Envoy's Rate Limit Service (RLS v3) over gRPC.\n\n")
	b.WriteString("### Synopsis\n\n```\n")
	b.Write(help.Bytes())
	b.WriteString("```\n\n### SEE ALSO\n\n")
	b.WriteString("* [rlctl render](rlctl_render.md)\t - writes the snapshot rlctl-enforcer loads\n")
	b.WriteString("* [rlctl serve-xds](rlctl_serve-xds.md)\t - serves it over xDS (--xds)\n")
	b.WriteString("* [The enforcer's behaviour and metrics](../enforcer.md)\n")
	return b.Bytes(), nil
}

// Metric is one metric family a running enforcer exports.
type Metric struct {
	Name, Type, Help string
	Labels           []string // the label names of its series, sorted; without le and quantile
}

// EnforcerMetrics starts two enforcers on the policy in policiesDir, one reading its snapshot
// from a file and one subscribed to an xDS address where nothing listens, both on the memory
// store and free loopback ports, and returns the rate_limit_ families their /metrics export,
// sorted by name: what the registry holds, not a list kept by hand. (The Go and process
// collectors' families are left out.)
func EnforcerMetrics(ctx context.Context, policiesDir string) ([]Metric, error) {
	m, err := schema.Load(policiesDir)
	if err != nil {
		return nil, fmt.Errorf("docgen: %w", err)
	}
	tmp, err := os.MkdirTemp("", "docgen-")
	if err != nil {
		return nil, fmt.Errorf("docgen: %w", err)
	}
	defer os.RemoveAll(tmp)
	snapshot := filepath.Join(tmp, "snapshot.json")
	if err := writeSnapshot(snapshot, m); err != nil {
		return nil, err
	}
	families := map[string]*dto.MetricFamily{}
	for _, c := range []enforcer.Config{
		{SnapshotPath: snapshot},
		{XDSAddr: "127.0.0.1:1"}, // rate_limit_xds_connected exists only with --xds
	} {
		c.GRPCAddr, c.AdminAddr, c.InstanceID = "127.0.0.1:0", "127.0.0.1:0", "docgen"
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if err := scrape(ctx, c, families); err != nil {
			return nil, err
		}
	}
	var out []Metric
	for name, f := range families {
		if !strings.HasPrefix(name, "rate_limit_") {
			continue
		}
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		met := Metric{Name: name, Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
		for l := range labels {
			met.Labels = append(met.Labels, l)
		}
		slices.Sort(met.Labels)
		out = append(out, met)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// scrape spawns an enforcer with c, reads its /metrics once into families, and closes it.
func scrape(ctx context.Context, c enforcer.Config, families map[string]*dto.MetricFamily) error {
	e, err := enforcer.Spawn(ctx, c)
	if err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	defer e.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.AdminAddr()+"/metrics", nil)
	if err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	got, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("docgen: /metrics: %w", err)
	}
	for name, f := range got {
		families[name] = f
	}
	return nil
}

func writeSnapshot(path string, m *policy.Model) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	if err := policy.WriteSnapshot(f, m); err != nil {
		f.Close()
		return fmt.Errorf("docgen: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	return nil
}

// MetricsTable is the markdown table of metrics: name, type, labels and help.
func MetricsTable(metrics []Metric) []byte {
	var b bytes.Buffer
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, m := range metrics {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = "`" + l + "`"
		}
		help := strings.ReplaceAll(m.Help, "|", `\|`)
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, strings.Join(labels, ", "), help)
	}
	return b.Bytes()
}

// MetricsBlock names the generated block of docs/enforcer.md that holds MetricsTable.
const MetricsBlock = "metrics"

// WriteEnforcerDocs writes rlctl-enforcer.md into cliDir and rewrites the metrics block of the
// document at docPath, listing what an enforcer on the policy in policiesDir exports.
func WriteEnforcerDocs(ctx context.Context, cliDir, docPath, policiesDir string) error {
	page, err := EnforcerPage()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cliDir, "rlctl-enforcer.md"), page, 0o644); err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	metrics, err := EnforcerMetrics(ctx, policiesDir)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(docPath)
	if err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	updated, err := ReplaceBlock(old, MetricsBlock, MetricsTable(metrics))
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	if err := os.WriteFile(docPath, updated, 0o644); err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	return nil
}
