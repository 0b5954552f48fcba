// Package xds owns how rlctl distributes policies over xDS: the resource types that the control
// plane (rlctl serve-xds, package xds/controlplane) serves, how a resource is encoded, and the
// client that rlctl-enforcer --xds subscribes with.
//
// # Resources
//
// The control plane is a State-of-the-World (SotW) server of the Aggregated Discovery Service
// (ADS). It answers any node ID the same way, so clients need no per-node setup. It serves two
// resource types:
//
//   - SnapshotTypeURL: one resource named SnapshotName whose bytes are exactly the enforcer's
//     snapshot, as `rlctl render --target snapshot` writes it (policy.WriteSnapshot). On the wire
//     the resource is a protobuf message with the snapshot in field 1 as bytes: the encoding of
//     google.protobuf.BytesValue, under a type URL of its own so that no client mistakes it for
//     any other BytesValue. A client reads it with DecodeSnapshot, then policy.ReadSnapshot, which
//     checks the snapshot's content hash. Its version is the snapshot's content hash
//     (policy.ContentHash), so a change that does not change the policy is never pushed.
//   - RateLimitConfigTypeURL: envoyproxy/ratelimit's RateLimitConfig, one resource per domain
//     named by the domain, which envoyproxy/ratelimit reads with CONFIG_TYPE=GRPC_XDS_SOTW. Its
//     version is a hash of the resources' encoding, so a policy change that envoyproxy/ratelimit
//     cannot see (a burst, say) is not pushed to it either.
//
// Every response carries the whole state of its type, as SotW requires.
//
// This package imports no CUE: the enforcer links it.
package xds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The resource types and names of rlctl's control plane.
const (
	// SnapshotTypeURL is the type of the enforcer's snapshot resource: field 1, bytes, the
	// snapshot (wire-compatible with google.protobuf.BytesValue).
	SnapshotTypeURL = "type.googleapis.com/rlctl.snapshot.v1.Snapshot"
	// SnapshotName is the name of the one snapshot resource.
	SnapshotName = "snapshot"
	// RateLimitConfigTypeURL is envoyproxy/ratelimit's RateLimitConfig (one per domain).
	RateLimitConfigTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
	// DefaultAddr is where rlctl serve-xds listens by default: the address envoyproxy/ratelimit
	// dials unless told otherwise.
	DefaultAddr = "127.0.0.1:18000"
)

// SnapshotResource wraps the bytes of a snapshot (policy.WriteSnapshot's output) as the resource
// a control plane serves under SnapshotTypeURL. The bytes are not copied.
func SnapshotResource(snapshot []byte) proto.Message {
	return wrapperspb.Bytes(snapshot)
}

// ErrResource means a resource is not what its type URL promises.
var ErrResource = errors.New("xds: bad resource")

// DecodeSnapshot returns the snapshot bytes that a resource of type SnapshotTypeURL holds.
func DecodeSnapshot(a *anypb.Any) ([]byte, error) {
	if a.GetTypeUrl() != SnapshotTypeURL {
		return nil, fmt.Errorf("%w: type %q, want %s", ErrResource, a.GetTypeUrl(), SnapshotTypeURL)
	}
	var b wrapperspb.BytesValue
	if err := proto.Unmarshal(a.GetValue(), &b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrResource, err)
	}
	return b.GetValue(), nil
}
