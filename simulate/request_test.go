package simulate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// referenceClaimKinds is decodePayload's meaning, written plainly: json.Unmarshal into raw
// values, then each value tried as a string, a number and a boolean. It returns the claims and
// the names of those whose values are not strings (numbers and booleans).
func referenceClaimKinds(raw []byte) (map[string]string, map[string]bool) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, nil
	}
	claims, notStrings := make(map[string]string, len(fields)), map[string]bool{}
	for k, v := range fields {
		var s string
		if json.Unmarshal(v, &s) == nil {
			claims[k] = s
			continue
		}
		var n json.Number
		if json.Unmarshal(v, &n) == nil {
			claims[k], notStrings[k] = n.String(), true
			continue
		}
		var b bool
		if json.Unmarshal(v, &b) == nil {
			claims[k], notStrings[k] = strconv.FormatBool(b), true
		}
	}
	return claims, notStrings
}

// notStrings returns the names of the claims whose last value is not a string.
func notStrings(claims []policy.Claim) map[string]bool {
	m := map[string]bool{}
	for _, c := range claims {
		if c.NotString {
			m[c.Name] = true
		} else {
			delete(m, c.Name)
		}
	}
	return m
}

var claimsSeeds = []string{
	`{"sub":"u1","plan":"pro","iat":1714564800,"admin":true,"x":null}`,
	` { "a" : -0.5e+3 , "b":false } `, `{}`, `{"a":1,"a":"two"}`, `{"a":"two","a":{"n":1}}`,
	`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`, `{"a":1e}`, `{"a":truex}`, `{"a":nul}`,
	`{"a":"b\"c"}`, `{"é":"ü"}`, "{\"a\":\"\x01\"}", `{"a":[1,2]}`, `{"a":1,}`, `{"a" 1}`,
	`{"a":1}x`, `[1]`, `"s"`, ``, `{"a":"\u00e9"}`, `{"":""}`, `{"a":1E400}`,
}

// The fast path of decodePayload must agree with the reference on every payload, and a cached
// token (requestBuilder.decode) must hold what the reference has of the claims it keeps.
func TestDecodePayload(t *testing.T) {
	b := newRequestBuilder([]string{"sub", "plan", "a", ""})
	for _, raw := range claimsSeeds {
		checkDecode(t, b, raw)
	}
}

func FuzzDecodePayload(f *testing.F) {
	for _, raw := range claimsSeeds {
		f.Add(raw)
	}
	b := newRequestBuilder([]string{"sub", "plan", "a", ""})
	f.Fuzz(func(t *testing.T, raw string) {
		checkDecode(t, b, raw)
	})
}

func checkDecode(t *testing.T, b *requestBuilder, raw string) {
	t.Helper()
	want, wantNS := referenceClaimKinds([]byte(raw))
	all := decodePayload(b64(raw))
	if got := claimMap(all); fmt.Sprint(got) != fmt.Sprint(want) || (got == nil) != (want == nil) {
		t.Errorf("decodePayload(%q): got %v, want %v", raw, got, want)
	}
	if got := notStrings(all); want != nil && fmt.Sprint(got) != fmt.Sprint(wantNS) {
		t.Errorf("decodePayload(%q): values not strings %v, want %v", raw, got, wantNS)
	}
	tok := b.decode(b64(raw))
	keptNS := map[string]bool{}
	for _, name := range b.claimNames {
		if wantNS[name] {
			keptNS[name] = true
		}
	}
	if got := notStrings(tok.claims); fmt.Sprint(got) != fmt.Sprint(keptNS) {
		t.Errorf("decode(%q): values not strings %v, want %v", raw, got, keptNS)
	}
	kept := map[string]string{}
	for _, name := range b.claimNames {
		if v, ok := want[name]; ok {
			kept[name] = v
		}
	}
	got := map[string]string{}
	for _, name := range b.claimNames {
		if v, ok := policy.LastClaim(tok.claims, name); ok {
			got[name] = v
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(kept) || (tok.claims == nil) != (want == nil) {
		t.Errorf("decode(%q): claims %v (nil %v), want %v (nil %v)", raw, got, tok.claims == nil, kept, want == nil)
	}
	wantUser := ""
	if sub := want["sub"]; sub != "" {
		wantUser = "sub:" + sub
	}
	if tok.user != wantUser {
		t.Errorf("decode(%q): user %q, want %q", raw, tok.user, wantUser)
	}
}

// A payload the fast path gives up on (a nested value) is decoded through a map; its claims
// still come in one order, by name, not in the map's random one.
func TestSlowClaimsInNameOrder(t *testing.T) {
	raw := `{"z":"1","n":{"deep":true},"b":"x","m":2,"a":"y"}`
	for i := 0; i < 20; i++ { // a map's order would differ from run to run within 20
		var names []string
		for _, c := range decodePayload(b64(raw)) {
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != "a,b,m,z" {
			t.Fatalf("decodePayload(%q): claims %s, want a,b,m,z", raw, got)
		}
	}
}

// claimString's fast paths must write every value as the json.Unmarshal tries do, and say
// which values are strings (null counts as one: it unmarshals into a string, as "").
func TestClaimString(t *testing.T) {
	slow := func(v json.RawMessage) (string, bool, bool) {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s, true, true
		}
		var n json.Number
		if json.Unmarshal(v, &n) == nil {
			return n.String(), false, true
		}
		var b bool
		if json.Unmarshal(v, &b) == nil {
			return strconv.FormatBool(b), false, true
		}
		return "", false, false
	}
	for _, v := range []string{`"u1"`, `""`, `"a\"b"`, `"\u00e9\ud83d\ude00"`, "\"\xff\xfe\"", `"é"`, `true`, `false`,
		`null`, `0`, `-12`, `1.5e+3`, `1E400`, `-0.0`, `{"a":1}`, `[1,"x"]`, `[]`} {
		gotS, gotStr, gotOK := claimString(json.RawMessage(v))
		wantS, wantStr, wantOK := slow(json.RawMessage(v))
		if gotS != wantS || gotStr != wantStr || gotOK != wantOK {
			t.Errorf("claimString(%s): got %q, %v, %v; want %q, %v, %v", v, gotS, gotStr, gotOK, wantS, wantStr, wantOK)
		}
	}
}

// The token cache keeps a working set as large as a generation: a token seen in the older
// generation moves up instead of being decoded again, and only one unseen for two
// generations is forgotten.
func TestTokenCache(t *testing.T) {
	b := newRequestBuilder(claimNames(nil))
	b.tokenCap = 2
	jwt := func(sub string) string { return "Bearer h." + b64(`{"sub":"`+sub+`"}`) + ".s" }
	first := map[string]*token{}
	for _, sub := range []string{"a", "b", "c"} { // c starts a generation: a and b are older
		first[sub] = b.tokenOf(jwt(sub))
		if want := "sub:" + sub; first[sub].user != want {
			t.Fatalf("token %s: user %q, want %q", sub, first[sub].user, want)
		}
	}
	steps := []struct {
		sub  string
		same bool // the cache returns the token it returned last for sub
	}{
		{"a", true},  // older: moves up to join c
		{"d", false}, // starts a generation: c and a are older, b is forgotten
		{"b", false}, // joins d
		{"c", true},  // older: starts a generation, d and b are older, a is forgotten
		{"a", false},
		{"d", true},
	}
	for i, st := range steps {
		tok := b.tokenOf(jwt(st.sub))
		if got := tok == first[st.sub]; got != st.same {
			t.Errorf("step %d (%s): cached %v, want %v", i, st.sub, got, st.same)
		}
		first[st.sub] = tok
		if want := "sub:" + st.sub; tok.user != want {
			t.Errorf("step %d: user %q, want %q", i, tok.user, want)
		}
	}
}

// A token comes from the recent slots only for its own payload: payloads that share a slot,
// long and short ones, each get their own token, whether the slot holds it or another's.
func TestRecentTokens(t *testing.T) {
	b := newRequestBuilder(claimNames(nil))
	jwt := func(sub string) string { return "Bearer h." + b64(`{"sub":"`+sub+`","tenant":"t"}`) + ".s" }
	subs := []string{"a", "b"} // short payloads: under 24 bytes
	for i := 0; i < 4*recentTokens; i++ {
		subs = append(subs, fmt.Sprintf("user-%d", i))
	}
	slots := map[int]int{}
	for _, sub := range subs {
		payload, _ := jwtPayload(jwt(sub))
		slots[recentSlot(payload)]++
	}
	if len(slots) < recentTokens/2 {
		t.Errorf("%d payloads fill %d of %d slots", len(subs), len(slots), recentTokens)
	}
	subs = append(subs, strings.Repeat("long", maxRecentPayload/4)) // a payload the slots do not keep
	for round := 0; round < 3; round++ {
		for i, sub := range subs {
			if round == 1 {
				sub = subs[len(subs)-1-i] // the other way round
			}
			if got, want := b.tokenOf(jwt(sub)).user, "sub:"+sub; got != want {
				t.Fatalf("round %d: user %q, want %q", round, got, want)
			}
		}
	}
	// A payload that follows a shorter one in its slot: append would grow the slot's array of
	// about 3.4 KB past 4 KB for it.
	short := jwt(strings.Repeat("s", 2560))
	shortPayload, _ := jwtPayload(short)
	var long string
	for i := 0; long == "" && i < 1_000_000; i++ {
		j := jwt(fmt.Sprintf("%d-%s", i, strings.Repeat("l", 3030)))
		if p, _ := jwtPayload(j); len(p) <= maxRecentPayload && recentSlot(p) == recentSlot(shortPayload) {
			long = j
		}
	}
	if long == "" {
		t.Fatal("no payload of 4 KB found for the slot of a shorter one")
	}
	b.tokenOf(short)
	b.tokenOf(long)
	for i, r := range b.recent {
		if cap(r.payload) > maxRecentPayload {
			t.Errorf("slot %d keeps an array of %d bytes (a payload of %d), more than %d", i, cap(r.payload), len(r.payload), maxRecentPayload)
		}
	}
}
