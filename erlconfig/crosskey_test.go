package erlconfig

import (
	"reflect"
	"testing"
)

// TestCrossKeyMatches: beside one another, keys user and user_tier, a and a_b meet ERL's lookup
// by joined text (key_value, then wildcard prefixes, then the key alone) as an envoyproxy/ratelimit
// probe found: user_tier=gold is limited by user="*", a_b=x by a="b_x", a=b by the key-only a_b,
// and user=tier by the key-only user_tier. Keys no prefix relates, or values that do not line
// up, meet nothing.
func TestCrossKeyMatches(t *testing.T) {
	limit := func(name string) *RateLimit { return &RateLimit{Unit: Minute, RequestsPerUnit: 1, Name: name} }
	ds := []Descriptor{
		{Key: "user", Value: "*", RateLimit: limit("all_users")},
		{Key: "user_tier", RateLimit: limit("tiers")},
		{Key: "a", Value: "b_x", RateLimit: limit("ab_exact")},
		{Key: "a_b", RateLimit: limit("ab_any")},
		{Key: "tenant", Value: "acme", Descriptors: []Descriptor{
			{Key: "path", Value: "/api*", RateLimit: limit("api")},
			{Key: "path_prefix", RateLimit: limit("prefixes")},
		}},
		{Key: "region", Value: "eu_west", RateLimit: limit("eu")},
	}
	shapes := [][]string{{"user"}, {"user_tier"}, {"a"}, {"a_b"}, {"tenant", "path"}, {"tenant", "path_prefix"}, {"region"}}
	var got []string
	for _, x := range crossKeyMatches(ds, shapes) {
		got = append(got, ruleOf(x.d)+": "+x.d.text()+": "+x.which)
	}
	want := []string{
		`all_users: user="*": every entry of key user_tier that no exact user_tier descriptor beside it matches ("user_tier_" starts with "user_")`,
		`tiers: user_tier: the entry user="tier"`,
		`ab_exact: a="b_x": the entry a_b="x"`,
		`ab_any: a_b: the entry a="b"`,
		`prefixes: path_prefix: the entry path="prefix"`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

// TestCrossMatch: each way ERL's lookup reaches a descriptor of another key.
func TestCrossMatch(t *testing.T) {
	for _, tc := range []struct {
		k    string
		d    Descriptor
		want string
	}{
		{"a", Descriptor{Key: "a_b"}, `the entry a="b"`},
		{"a_b", Descriptor{Key: "a", Value: "b"}, `an entry of key a_b that no a_b descriptor beside it matches (ERL then looks up the key alone)`},
		{"a", Descriptor{Key: "a_b", Value: "x*"}, `an entry of key a whose value starts with "b_x"`},
		{"user_tier", Descriptor{Key: "user", Value: "t*"}, `every entry of key user_tier that no exact user_tier descriptor beside it matches ("user_tier_" starts with "user_t")`},
		{"user_tier", Descriptor{Key: "user", Value: "x*"}, ``},
		{"b", Descriptor{Key: "a_b"}, ``},
		{"a", Descriptor{Key: "a_"}, ``}, // the entry a="" would need an empty value
		{"ab", Descriptor{Key: "a", Value: "b"}, ``},
	} {
		if got := crossMatch(tc.k, &tc.d); got != tc.want {
			t.Errorf("crossMatch(%q, %s): got %q, want %q", tc.k, tc.d.text(), got, tc.want)
		}
	}
}
