package controlplane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/xds"
)

// resources is one version of everything the control plane serves, by type URL. It is the
// cache.ResourceSnapshot that the snapshot cache serves to every node.
type resources struct {
	byType map[string]typeResources
	// model is the policy the resources came from, for /config.
	model *policy.Model
	// erlNotes say what the RateLimitConfigs approximate or assume.
	erlNotes []string
}

// typeResources are the resources of one type and their version.
type typeResources struct {
	version string
	items   map[string]types.ResourceWithTTL
}

var _ cache.ResourceSnapshot = (*resources)(nil)

// buildResources encodes m as the snapshot resource, versioned by its content hash, and as
// envoyproxy/ratelimit's RateLimitConfigs, versioned by a hash of their encoding.
func buildResources(m *policy.Model) (*resources, error) {
	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, m); err != nil {
		return nil, err
	}
	version, err := policy.ContentHash(m)
	if err != nil {
		return nil, err
	}
	r := &resources{model: m, byType: map[string]typeResources{
		xds.SnapshotTypeURL: {version: version, items: map[string]types.ResourceWithTTL{
			xds.SnapshotName: {Resource: xds.SnapshotResource(buf.Bytes())},
		}},
	}}
	rlc, notes := rateLimitConfigs(m)
	if r.byType[xds.RateLimitConfigTypeURL], err = hashed(rlc); err != nil {
		return nil, err
	}
	r.erlNotes = notes
	return r, nil
}

// hashed versions named resources by a hash of their deterministic encoding, in name order.
func hashed(named map[string]proto.Message) (typeResources, error) {
	h := sha256.New()
	items := make(map[string]types.ResourceWithTTL, len(named))
	for _, name := range slices.Sorted(maps.Keys(named)) {
		b, err := cache.MarshalResource(named[name])
		if err != nil {
			return typeResources{}, fmt.Errorf("encoding %s: %w", name, err)
		}
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(b))
		h.Write(b)
		items[name] = types.ResourceWithTTL{Resource: named[name]}
	}
	return typeResources{version: "sha256:" + hex.EncodeToString(h.Sum(nil)), items: items}, nil
}

// version is the version of typeURL's resources, "" when none are served.
func (r *resources) version(typeURL string) string { return r.byType[typeURL].version }

// sameAs reports whether r serves what o serves: the same version of every type.
func (r *resources) sameAs(o *resources) bool {
	if o == nil || len(r.byType) != len(o.byType) {
		return false
	}
	for t, tr := range r.byType {
		if o.byType[t].version != tr.version {
			return false
		}
	}
	return true
}

func (r *resources) GetVersion(typeURL string) string { return r.byType[typeURL].version }

func (r *resources) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return r.byType[typeURL].items
}

func (r *resources) GetResources(typeURL string) map[string]types.Resource {
	items := r.byType[typeURL].items
	out := make(map[string]types.Resource, len(items))
	for name, it := range items {
		out[name] = it.Resource
	}
	return out
}

// ConstructVersionMap has nothing to do: every resource has its type's version.
func (r *resources) ConstructVersionMap() error { return nil }

// GetVersionMap gives each resource its type's version (for delta xDS clients).
func (r *resources) GetVersionMap(typeURL string) map[string]string {
	tr := r.byType[typeURL]
	out := make(map[string]string, len(tr.items))
	for name := range tr.items {
		out[name] = tr.version
	}
	return out
}

// everyNode maps every node to one cache entry: the control plane serves all nodes alike, so
// clients need no per-node setup.
type everyNode struct{}

// fleetKey is the snapshot cache's one node key.
const fleetKey = "*"

func (everyNode) ID(*core.Node) string { return fleetKey }
