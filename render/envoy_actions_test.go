package render

import (
	"regexp"
	"testing"
)

// TestClaimHeader: the header that carries a jwt_subject claim is a valid header name (RFC 9110
// token, lower case as Envoy keeps them) for any claim, the claim itself when that is one, and
// two claims get two headers. "https://acme.example/uid" gave a name with ':' and '/', and "UID"
// and "uid" shared "x-rlctl-jwt-uid".
func TestClaimHeader(t *testing.T) {
	token := regexp.MustCompile("^[a-z0-9!#$%&'*+.^_`|~-]+$")
	seen := map[string]string{}
	for _, c := range []string{"sub", "user_id", "email.verified", "UID", "uid", "https/acme.example/uid", "x y", "é"} {
		h := claimHeader(c)
		if !token.MatchString(h) {
			t.Errorf("claim %q: header %q is not a lower-case header name", c, h)
		}
		if other, ok := seen[h]; ok {
			t.Errorf("claims %q and %q share header %q", other, c, h)
		}
		seen[h] = c
	}
	if got := claimHeader("sub"); got != "x-rlctl-jwt-sub" {
		t.Errorf("claim sub: header %q, want x-rlctl-jwt-sub", got)
	}
}
