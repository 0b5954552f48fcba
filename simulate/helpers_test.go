package simulate

import (
	"encoding/base64"
	"testing"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// examplePolicies loads the example policies the replay tests and benchmarks run.
func examplePolicies(tb testing.TB) *policy.Model {
	tb.Helper()
	m, err := schema.Load("../policies")
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// see records user behind addr, as the shards do.
func (n *natTracker) see(addr, user string) { n.seeHash(addrHash(addr), userHash(user)) }

// countOf counts the users behind addr.
func (n *natTracker) countOf(addr string) (int, bool) { return n.count(addrHash(addr)) }

// The JWT decoding of the replay, whole, as the tests' oracle and subject: the replay itself
// decodes through requestBuilder, which keeps only the claims its sources read.

// decodeClaims returns the top-level claims of the JWT in an Authorization header value
// ("Bearer <jwt>" or a bare JWT) as strings, or nil when it holds no decodable JWT. The
// signature is NOT verified. Strings are taken as they are; numbers and booleans are written
// as JSON writes them.
func decodeClaims(auth string) map[string]string {
	payload, ok := jwtPayload(auth)
	if !ok {
		return nil
	}
	return claimMap(decodePayload(payload))
}

// claimMap puts claims into a map, in order: of several with one name the last counts. It
// returns nil for nil claims (no decodable payload).
func claimMap(claims []policy.Claim) map[string]string {
	if claims == nil {
		return nil
	}
	m := make(map[string]string, len(claims))
	for _, c := range claims {
		m[c.Name] = c.Value
	}
	return m
}

// decodePayload decodes a JWT payload segment into its claims (DecodeClaims), or returns nil
// when it is not a JSON object. A payload without claims decodes to an empty, non-nil list.
func decodePayload(payload string) []policy.Claim {
	var raw []byte // its own: the claims view it
	claims, ok := appendClaims(make([]policy.Claim, 0, 4), &raw, payload, nil)
	if !ok {
		return nil
	}
	return claims
}
