package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/render"
	"github.com/rlctl/rlctl/schema"
)

// The ConfigMaps of the Kubernetes example that hold rendered files, and their keys.
const (
	snapshotConfigMapFile = "snapshot-configmap.yaml"
	snapshotKey           = "snapshot.json"
	envoyConfigMapFile    = "envoy-configmap.yaml"
	envoyKey              = "envoy.yaml"
)

// configMapYAML writes a ConfigMap manifest that holds data under key, as a YAML literal block,
// headed by a comment saying where it comes from.
func configMapYAML(name, key string, data []byte, source string) ([]byte, error) {
	if !bytes.HasSuffix(data, []byte("\n")) || bytes.HasSuffix(data, []byte("\n\n")) {
		return nil, fmt.Errorf("%s: a literal block keeps exactly one final newline", key)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Generated from policies/ by the deploy tests; do not edit. It holds what
#   %s
# prints when run from the repository's root. Regenerate it with
#   go test ./deploy -run TestKubernetesConfigMapsCurrent -update
# or without Go's test runner as README.md shows.
apiVersion: v1
kind: ConfigMap
metadata:
  name: %s
  labels:
    app.kubernetes.io/name: rlctl-gateway
data:
  %s: |
`, source, name, key)
	for line := range strings.Lines(string(data)) {
		if line != "\n" {
			b.WriteString("    ")
		}
		b.WriteString(line)
	}
	return b.Bytes(), nil
}

// TestKubernetesConfigMapsCurrent keeps the example's rendered ConfigMaps in step with
// policies/ and the render targets: the snapshot the enforcer loads, and the Envoy bootstrap
// whose rate limit service is the enforcer's --grpc-addr in the same pod. Run it with -update
// after a change to either.
func TestKubernetesConfigMapsCurrent(t *testing.T) {
	ms := newManifests()
	examples := newManifests()
	for _, f := range []struct {
		name string
		into *manifests
	}{{"deployment.yaml", ms}, {"redis-secret.example.yaml", examples}} {
		data, err := os.ReadFile(filepath.Join(k8sDir, f.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.into.add(f.name, data); err != nil {
			t.Fatal(err)
		}
	}
	_, cs := gatewayPod(t, ms)
	conf, err := enforcerSettings(t, cs[enforcerContainer], examples)
	if err != nil {
		t.Fatal(err)
	}

	// Rendered from the root, as the README's commands run, so that the positions in the
	// snapshot read policies/FILE.
	t.Chdir("..")
	m, err := schema.Load("policies")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		target, file, configMap, key, source string
		opts                                 render.Options
	}{
		{"snapshot", snapshotConfigMapFile, snapshotConfigMap, snapshotKey,
			"rlctl render --target snapshot policies", render.Options{}},
		{"envoy", envoyConfigMapFile, envoyConfigMap, envoyKey,
			"rlctl render --target envoy --bootstrap --rls-address " + conf.GRPCAddr + " policies",
			render.Options{Envoy: render.EnvoyOptions{Bootstrap: true, ClusterAddress: conf.GRPCAddr}}},
	} {
		t.Run(c.target, func(t *testing.T) {
			target, ok := render.Lookup(c.target)
			if !ok {
				t.Fatalf("no render target %s", c.target)
			}
			res, err := target.Render(m, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Files) != 1 {
				t.Fatalf("got %d files, want 1", len(res.Files))
			}
			want := res.Files[0].Data
			got, err := configMapYAML(c.configMap, c.key, want, c.source)
			if err != nil {
				t.Fatal(err)
			}
			// The API server refuses a ConfigMap over 1 MiB; past that, serve the policy over
			// xDS (rlctl serve-xds) instead.
			if len(got) >= 1<<20 {
				t.Errorf("ConfigMap %s: %d bytes, over the 1 MiB a ConfigMap may hold", c.configMap, len(got))
			}
			path := filepath.Join("deploy", k8sDir, c.file)
			golden.Check(t, path, got)
			// The manifest must give Kubernetes the rendered bytes back.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			back := newManifests()
			if err := back.add(c.file, data); err != nil {
				t.Fatal(err)
			}
			if cm := back.configMaps[c.configMap]; cm == nil || cm.Data[c.key] != string(want) {
				t.Errorf("%s: ConfigMap %s does not hold the rendered %s under key %s", path, c.configMap, c.target, c.key)
			}
		})
	}
}
