package deploy

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// configMapVolume lays out dir as the kubelet does a ConfigMap volume: the files in a
// timestamped directory, a ..data symlink to it, and each key a symlink through ..data.
type configMapVolume struct {
	t   *testing.T
	dir string
	n   int
}

// write puts a new version of the snapshot into the volume as the kubelet's atomic writer
// does: a new timestamped directory, a ..data_tmp symlink to it renamed over ..data, and the
// old directory removed.
func (v *configMapVolume) write(m *policy.Model) {
	v.t.Helper()
	v.n++
	ts := filepath.Join(v.dir, "..2026_12_03_00_00_00."+strconv.Itoa(v.n))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	writeSnapshot(v.t, filepath.Join(ts, snapshotKey), m)
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	key := filepath.Join(v.dir, snapshotKey)
	if _, err := os.Lstat(key); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", snapshotKey), key); err != nil {
			v.t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			v.t.Fatal(err)
		}
	}
}

// TestConfigMapUpdateReloads is what the Kubernetes example relies on (deployment.yaml's
// snapshot mount): a real enforcer whose --config is a file of a ConfigMap volume reloads
// when the kubelet swaps the volume's ..data symlink, without a restart.
func TestConfigMapUpdateReloads(t *testing.T) {
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.write(m)
	e := spawnEnforcer(t, filepath.Join(v.dir, snapshotKey), nil)
	first := e.ConfigVersion()
	if want, _ := policy.ContentHash(m); first != want {
		t.Fatalf("got version %s at start, want %s", first, want)
	}

	// The same policy, one limit higher: a new version.
	l := &m.Domains[0].Rules[0].Limits[0]
	l.Requests++
	l.Burst++
	want, err := policy.ContentHash(m)
	if err != nil {
		t.Fatal(err)
	}
	if want == first {
		t.Fatal("the edited policy has the same version")
	}
	v.write(m)
	deadline := time.Now().Add(10 * time.Second)
	for e.ConfigVersion() != want {
		if time.Now().After(deadline) {
			t.Fatalf("after the ..data swap: still serving %s, want %s", e.ConfigVersion(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
