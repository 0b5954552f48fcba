package deploy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/rlctl/rlctl/enforcer"
)

// k8sDir is the Kubernetes example, relative to this package.
const k8sDir = "kubernetes"

// The names the example's manifests and their tests agree on.
const (
	enforcerContainer = "rlctl-enforcer"
	envoyContainer    = "envoy"
	snapshotConfigMap = "rlctl-snapshot"
	envoyConfigMap    = "rlctl-envoy"
)

// kustomization is the part of a kustomize Kustomization the example uses; decoding it
// strictly rejects any other field.
type kustomization struct {
	APIVersion string           `json:"apiVersion"`
	Kind       string           `json:"kind"`
	Resources  []string         `json:"resources"`
	Images     []kustomizeImage `json:"images"`
}

// kustomizeImage is an entry of a Kustomization's images: what to replace an image name with.
type kustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// manifests are the decoded objects of the example, by kind and name.
type manifests struct {
	deployments map[string]*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	secrets     map[string]*corev1.Secret
	services    map[string]*corev1.Service
	pdbs        map[string]*policyv1.PodDisruptionBudget
}

func newManifests() *manifests {
	return &manifests{
		deployments: map[string]*appsv1.Deployment{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, services: map[string]*corev1.Service{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{},
	}
}

// decodeStrict decodes one YAML document into obj, rejecting unknown and duplicate fields.
func decodeStrict(doc []byte, obj any) error {
	return yaml.UnmarshalStrict(doc, obj)
}

// add decodes every document of a manifest file strictly into the k8s.io/api type of its
// apiVersion and kind, and records it. A kind the example does not use is an error, so that a
// new one gets a case here (and its checks) rather than passing unchecked.
func (ms *manifests) add(file string, data []byte) error {
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		var (
			obj  any
			name func() string
		)
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			obj, name = o, func() string { ms.deployments[o.Name] = o; return o.Name }
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			obj, name = o, func() string { ms.configMaps[o.Name] = o; return o.Name }
		case "v1 Secret":
			o := &corev1.Secret{}
			obj, name = o, func() string { ms.secrets[o.Name] = o; return o.Name }
		case "v1 Service":
			o := &corev1.Service{}
			obj, name = o, func() string { ms.services[o.Name] = o; return o.Name }
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			obj, name = o, func() string { ms.pdbs[o.Name] = o; return o.Name }
		default:
			return fmt.Errorf("%s: document %d: %s %s: not a kind this test knows", file, i+1, tm.APIVersion, tm.Kind)
		}
		if err := decodeStrict(doc, obj); err != nil {
			return fmt.Errorf("%s: document %d (%s): %w", file, i+1, tm.Kind, err)
		}
		if name() == "" {
			return fmt.Errorf("%s: document %d (%s): no metadata.name", file, i+1, tm.Kind)
		}
	}
	return nil
}

// loadKubernetes decodes kustomization.yaml and every manifest it lists (resources), and the
// example files beside them (*.example.yaml), which are user-provided objects shown for
// reference and so not applied. Every other YAML file in the directory is an error: a
// manifest that kustomize does not apply is one nobody deploys.
func loadKubernetes(t *testing.T, dir string) (k kustomization, resources, examples *manifests) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: got %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	resources, examples = newManifests(), newManifests()
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("kustomization.yaml: resource %s: %v", r, err)
		}
		if err := resources.add(r, data); err != nil {
			t.Fatal(err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		base := filepath.Base(f)
		switch {
		case base == "kustomization.yaml" || slices.Contains(k.Resources, base):
		case strings.HasSuffix(base, ".example.yaml"):
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := examples.add(base, data); err != nil {
				t.Fatal(err)
			}
		default:
			t.Errorf("%s: neither in kustomization.yaml's resources nor an .example.yaml", base)
		}
	}
	return k, resources, examples
}

// gatewayPod returns the example's one Deployment and its containers by name.
func gatewayPod(t *testing.T, ms *manifests) (*appsv1.Deployment, map[string]*corev1.Container) {
	t.Helper()
	if len(ms.deployments) != 1 {
		t.Fatalf("got %d Deployments, want 1", len(ms.deployments))
	}
	var d *appsv1.Deployment
	for _, dd := range ms.deployments {
		d = dd
	}
	cs := map[string]*corev1.Container{}
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		cs[c.Name] = c
	}
	for _, name := range []string{envoyContainer, enforcerContainer} {
		if cs[name] == nil {
			t.Fatalf("Deployment %s: no container %s", d.Name, name)
		}
	}
	return d, cs
}

// enforcerSettings parses the enforcer container's arguments and environment as the enforcer
// does, on top of the image's environment from the Dockerfile. The value of an env var taken
// from a Secret is the example Secret's, and from a field "pod-0".
func enforcerSettings(t *testing.T, c *corev1.Container, examples *manifests) (enforcer.Config, error) {
	t.Helper()
	env := dockerfileEnv(t)
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s := examples.secrets[ref.Name]
			if s == nil {
				t.Fatalf("env %s: no example of Secret %s", e.Name, ref.Name)
			}
			env[e.Name] = s.StringData[ref.Key]
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "pod-0"
		default:
			t.Fatalf("env %s: a source this test does not know", e.Name)
		}
	}
	if len(c.Command) > 0 {
		t.Fatalf("container %s: command %q would replace the image's entrypoint, rlctl-enforcer", c.Name, c.Command)
	}
	return enforcer.ParseArgs(c.Args, func(k string) string { return env[k] }, io.Discard)
}

// dockerfileEnv is the ENV of the Dockerfile's final stage.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return stages[len(stages)-1].env()
}

// containerPort resolves a probe's or a Service's port, by name or number, to one of c's
// container ports.
func containerPort(c *corev1.Container, port string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// mountedFile finds the volume mount of c that holds file, and returns the volume and the
// file's path inside it.
func mountedFile(pod *corev1.PodSpec, c *corev1.Container, file string) (*corev1.Volume, *corev1.VolumeMount, string, bool) {
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		rel, ok := strings.CutPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for j := range pod.Volumes {
			if pod.Volumes[j].Name == m.Name {
				return &pod.Volumes[j], m, rel, true
			}
		}
	}
	return nil, nil, "", false
}

// TestKubernetesManifests decodes the example's manifests strictly into k8s.io/api types and
// checks what Kubernetes would only find at run time: that names, ports, files and flags that
// one manifest refers to exist in another, and that the containers are bounded and locked down.
func TestKubernetesManifests(t *testing.T) {
	k, ms, examples := loadKubernetes(t, k8sDir)
	d, cs := gatewayPod(t, ms)
	pod := &d.Spec.Template.Spec
	podLabels := d.Spec.Template.Labels

	t.Run("selectors", func(t *testing.T) {
		sel, err := metav1.LabelSelectorAsMap(d.Spec.Selector)
		if err != nil || !subset(sel, podLabels) {
			t.Errorf("Deployment %s: selector %v does not select its pods %v (%v)", d.Name, sel, podLabels, err)
		}
		for _, s := range ms.services {
			if len(s.Spec.Selector) == 0 || !subset(s.Spec.Selector, podLabels) {
				t.Errorf("Service %s: selector %v does not select the pods %v", s.Name, s.Spec.Selector, podLabels)
			}
			for _, p := range s.Spec.Ports {
				if _, ok := containerPort(cs[envoyContainer], p.TargetPort.String()); !ok {
					t.Errorf("Service %s: targetPort %s is not a port of container %s", s.Name, p.TargetPort.String(), envoyContainer)
				}
			}
		}
		if len(ms.pdbs) == 0 {
			t.Error("no PodDisruptionBudget")
		}
		for _, p := range ms.pdbs {
			sel, err := metav1.LabelSelectorAsMap(p.Spec.Selector)
			if err != nil || len(sel) == 0 || !subset(sel, podLabels) {
				t.Errorf("PodDisruptionBudget %s: selector %v does not select the pods %v (%v)", p.Name, sel, podLabels, err)
			}
		}
	})

	t.Run("containers", func(t *testing.T) {
		nonRoot := pod.SecurityContext != nil && pod.SecurityContext.RunAsNonRoot != nil && *pod.SecurityContext.RunAsNonRoot
		for _, c := range pod.Containers {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("container %s: no %s request", c.Name, r)
				}
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("container %s: no %s limit", c.Name, r)
				}
			}
			sc := c.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("container %s: no securityContext", c.Name)
			case !nonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot):
				t.Errorf("container %s: runAsNonRoot is not set (on the pod or the container)", c.Name)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("container %s: the root filesystem is writable", c.Name)
			case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
			case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
				t.Errorf("container %s: capabilities: want drop ALL", c.Name)
			}
			for _, p := range []struct {
				kind  string
				probe *corev1.Probe
			}{{"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}} {
				if p.probe == nil {
					t.Errorf("container %s: no %s probe", c.Name, p.kind)
					continue
				}
				var port string
				switch h := p.probe.ProbeHandler; {
				case h.HTTPGet != nil:
					port = h.HTTPGet.Port.String()
				case h.TCPSocket != nil:
					port = h.TCPSocket.Port.String()
				default:
					t.Errorf("container %s: %s probe: want httpGet or tcpSocket", c.Name, p.kind)
					continue
				}
				if _, ok := containerPort(&c, port); !ok {
					t.Errorf("container %s: %s probe port %s is not a port of the container", c.Name, p.kind, port)
				}
			}
			for _, m := range c.VolumeMounts {
				if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
					t.Errorf("container %s: mount of volume %s, which the pod does not have", c.Name, m.Name)
				}
			}
		}
	})

	t.Run("references", func(t *testing.T) {
		for _, v := range pod.Volumes {
			if v.ConfigMap != nil && ms.configMaps[v.ConfigMap.Name] == nil {
				t.Errorf("volume %s: ConfigMap %s is not in kustomization.yaml's resources", v.Name, v.ConfigMap.Name)
			}
		}
		readme, err := os.ReadFile(filepath.Join(k8sDir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pod.Containers {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				if ms.secrets[ref.Name] != nil {
					continue
				}
				// A Secret the user provides: README.md says how to create it, and an
				// .example.yaml shows it.
				if !bytes.Contains(readme, []byte("`"+ref.Name+"`")) || !bytes.Contains(readme, []byte("`"+ref.Key+"`")) {
					t.Errorf("container %s: env %s: Secret %s (key %s) is neither a resource nor documented in README.md as yours to create",
						c.Name, e.Name, ref.Name, ref.Key)
				}
				if s := examples.secrets[ref.Name]; s == nil || s.StringData[ref.Key] == "" {
					t.Errorf("container %s: env %s: no .example.yaml shows Secret %s with key %s", c.Name, e.Name, ref.Name, ref.Key)
				}
			}
		}
		image, _, _ := strings.Cut(cs[enforcerContainer].Image, ":")
		if !slices.ContainsFunc(k.Images, func(i kustomizeImage) bool { return i.Name == image }) {
			t.Errorf("kustomization.yaml: images does not name %s, the enforcer's image", image)
		}
	})

	t.Run("enforcer", func(t *testing.T) {
		c := cs[enforcerContainer]
		conf, err := enforcerSettings(t, c, examples)
		if err != nil {
			t.Fatalf("rlctl-enforcer rejects its container's arguments %q and environment: %v", c.Args, err)
		}
		if conf.Store != "redis" || conf.RedisURL == "" {
			t.Errorf("got --store %q with --redis-url %q, want redis with a URL from the Secret", conf.Store, conf.RedisURL)
		}
		// The snapshot is a file of the ConfigMap volume, mounted as a directory: the kubelet
		// never updates a subPath mount, and the enforcer reloads on the ..data swap.
		v, m, rel, ok := mountedFile(pod, c, conf.SnapshotPath)
		switch {
		case !ok:
			t.Errorf("--config %s: no volume mounted there", conf.SnapshotPath)
		case m.SubPath != "":
			t.Errorf("--config %s: mounted with subPath %s, which the kubelet never updates", conf.SnapshotPath, m.SubPath)
		case v.ConfigMap == nil || v.ConfigMap.Name != snapshotConfigMap:
			t.Errorf("--config %s: volume %s is not ConfigMap %s", conf.SnapshotPath, v.Name, snapshotConfigMap)
		case ms.configMaps[snapshotConfigMap] != nil && ms.configMaps[snapshotConfigMap].Data[rel] == "":
			t.Errorf("--config %s: ConfigMap %s has no key %s", conf.SnapshotPath, snapshotConfigMap, rel)
		}
		_, adminPort, err := net.SplitHostPort(conf.AdminAddr)
		if err != nil {
			t.Fatalf("--admin-addr %s: %v", conf.AdminAddr, err)
		}
		if host, _, _ := net.SplitHostPort(conf.AdminAddr); host == "127.0.0.1" || host == "localhost" {
			t.Errorf("--admin-addr %s: the kubelet's probes and Prometheus cannot reach loopback", conf.AdminAddr)
		}
		if p, ok := containerPort(c, "admin"); !ok || strconv.Itoa(int(p)) != adminPort {
			t.Errorf("container port admin: got %d (present %v), want --admin-addr's %s", p, ok, adminPort)
		}
		for _, p := range []struct {
			kind, path string
			probe      *corev1.Probe
		}{{"readiness", "/readyz", c.ReadinessProbe}, {"liveness", "/healthz", c.LivenessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "admin" {
				t.Errorf("%s probe: want httpGet %s on port admin", p.kind, p.path)
			}
		}
	})

	t.Run("envoy", func(t *testing.T) {
		c := cs[envoyContainer]
		file := envoyConfigPath(c)
		v, m, rel, ok := mountedFile(pod, c, file)
		switch {
		case file == "":
			t.Fatalf("container %s: no --config-path or -c in %q", c.Name, c.Args)
		case !ok:
			t.Fatalf("Envoy's config %s: no volume mounted there", file)
		case m.SubPath != "" || v.ConfigMap == nil || v.ConfigMap.Name != envoyConfigMap:
			t.Fatalf("Envoy's config %s: want a directory mount of ConfigMap %s", file, envoyConfigMap)
		}
		cm := ms.configMaps[envoyConfigMap]
		if cm == nil || cm.Data[rel] == "" {
			t.Fatalf("ConfigMap %s has no key %s, Envoy's config", envoyConfigMap, rel)
		}
		listen, err := bootstrapListenerPort([]byte(cm.Data[rel]))
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := containerPort(c, "http"); !ok || p != listen {
			t.Errorf("container port http: got %d (present %v), want the bootstrap listener's %d", p, ok, listen)
		}
	})
}

// envoyConfigPath is the file Envoy's arguments name as its config.
func envoyConfigPath(c *corev1.Container) string {
	for i, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--config-path="); ok {
			return v
		}
		if (a == "-c" || a == "--config-path") && i+1 < len(c.Args) {
			return c.Args[i+1]
		}
	}
	return ""
}

// bootstrapListenerPort is the port of the one listener of a rendered Envoy bootstrap.
func bootstrapListenerPort(bootstrap []byte) (int32, error) {
	var b struct {
		StaticResources struct {
			Listeners []struct {
				Address struct {
					SocketAddress struct {
						PortValue int32 `json:"port_value"`
					} `json:"socket_address"`
				} `json:"address"`
			} `json:"listeners"`
		} `json:"static_resources"`
	}
	if err := yaml.Unmarshal(bootstrap, &b); err != nil {
		return 0, fmt.Errorf("envoy bootstrap: %w", err)
	}
	if n := len(b.StaticResources.Listeners); n != 1 {
		return 0, fmt.Errorf("envoy bootstrap: got %d listeners, want 1", n)
	}
	return b.StaticResources.Listeners[0].Address.SocketAddress.PortValue, nil
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesDecodeStrict makes sure the decoding above would catch the mistakes it is for.
func TestKubernetesDecodeStrict(t *testing.T) {
	tests := []struct {
		name, doc string
	}{
		{"unknown field", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selectr: {a: b}}\n"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\ndata: {b: y}\n"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"},
		{"wrong type", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: two}\n"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\ndata: {a: x}\n"},
	}
	for _, tt := range tests {
		if err := newManifests().add(tt.name, []byte(tt.doc)); err == nil {
			t.Errorf("%s: got no error", tt.name)
		}
	}
	ok := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: x}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p}\nspec: {minAvailable: 1}\n"
	ms := newManifests()
	if err := ms.add("ok", []byte(ok)); err != nil {
		t.Fatal(err)
	}
	if ms.configMaps["c"] == nil || ms.pdbs["p"] == nil {
		t.Errorf("got %+v, want ConfigMap c and PodDisruptionBudget p", ms)
	}
}
