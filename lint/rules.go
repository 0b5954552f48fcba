package lint

import "github.com/rlctl/rlctl/finding"

// LoadID is the ID of findings that say a policy does not load: a CUE syntax error, a schema
// violation, a conflict or a value out of range. Problems the loader refuses that are lint checks
// (RL001, RL003, RL005, RL013) keep their own IDs.
const LoadID = "RL000"

// loadRule describes LoadID; Load produces its findings.
var loadRule = finding.Rule{
	ID: LoadID, Name: "cue", Severity: finding.Error,
	Summary: "The policy does not load: a CUE syntax error, a schema violation, a conflict or a bad value.",
	Help: `rlctl loads the .cue files of the given paths, unifies them with the policy schema and
compiles the result. Anything that stops that is reported here, at the position in your file: a
syntax error, a field the schema does not know, a value of the wrong type or out of range (a
window outside 1s to 365d, a zero timeout, a date that does not exist, a bad name, a burst on a
sliding or fixed window, which only a token bucket has), two files
that give one field different values, or a repository that declares no domain. The loader also
refuses duplicate matches, unknown descriptor keys, a minimum lease above the maximum and a canary
without a percentage; those keep their own IDs (RL001, RL003, RL005, RL013).

Fix: correct the file at the reported position. 'cue vet' shows the same errors.

Example:

    rules: tenant: limits: [{requests: -5, window: "1m"}]
    // requests: must be a positive whole number below 2^53`,
}

// checks are the lint rules in ID order. IDs are public API: never renumber or reuse one.
var checks = []check{
	{finding.Rule{
		ID: "RL001", Name: "duplicate-match", Severity: finding.Error,
		Summary: "Two rules of a domain have the same match path, so they are one descriptor key.",
		Help: `A rule's match path (its keys and values, outermost first) is the composite
descriptor key the rate limit service looks up. Two rules with the same path in one domain
collide: only one limit can apply, and which one depends on load order.

Fix: merge the two rules (a rule may have several limits), or make their matches differ.

Example:

    rules: a: match: [{key: "tenant", value: "acme"}]
    rules: b: match: [{key: "tenant", value: "acme"}]   // RL001: same as rule "a"`,
	}, nil},
	{finding.Rule{
		ID: "RL002", Name: "unreachable-rule", Severity: finding.Error,
		Summary: "A rule is never selected: an earlier wildcard (or a catch-all) at the same level takes every entry it matches.",
		Help: `Descriptor lookup follows envoyproxy/ratelimit: at each level it takes the child whose
key and value match exactly, else the first wildcard (value ending in '*') in declaration order
whose prefix the value has, else the key-only match; it never backtracks, and the descriptor's
depth must equal the rule's. So a wildcard "ab*" declared after "a*" is never chosen (but by
the value "ab*" itself: the exact lookup finds a wildcard by its value as written, as
envoyproxy/ratelimit's does, and no request sends that), and a key-only match is never chosen
when the same key has the wildcard "*".

Fix: declare the more specific wildcard first, or drop the rule.

Example:

    rules: all:  match: [{key: "tenant", value: "*"}]
    rules: anon: match: [{key: "tenant"}]        // RL002: "*" takes every tenant first`,
	}, checkUnreachable},
	{finding.Rule{
		ID: "RL003", Name: "unknown-descriptor", Severity: finding.Error,
		Summary: "A match key (or sub_shards attribute) no source produces, or a value its source never produces.",
		Help: `Envoy builds descriptors from the domain's sources; a rule can only match entries a
source produces. A key no source declares is usually a typo, and the rule never applies. For
generic_key and path_match sources the value is fixed, and identity values start with a
waterfall tier ("api_key:..."), so other values never match either. A remote_address source
writes canonical text: with mask "none" an address without port or prefix length
("2001:db8::7", not "2001:db8:0:0::7" or "198.51.100.7/32"), with mask "subnet" the /24 or /64
network ("203.0.113.0/24", not "203.0.113.7"), as does the identity waterfall's subnet tier.

Fix: correct the key or value, or add the source.

Example:

    sources: tenant: {kind: "header", header: "x-tenant-id"}
    rules: t: match: [{key: "tennant"}]          // RL003: no source produces "tennant"`,
	}, perRule(checkUnknownDescriptor)},
	{finding.Rule{
		ID: "RL004", Name: "exact-range", Severity: finding.Error,
		Summary: "A limit's arithmetic can leave the exact integer range of a Lua double (2^53).",
		Help: `The engine runs the same integer arithmetic in Go and in Redis's Lua, where every
number is a double: integers are exact only up to 2^53−1. A token bucket stores tokens in units
(a token is window_ms/g units, g = gcd(requests, window_ms)), so its largest intermediate is
2 × burst × window_ms / g + requests / g; a window's is (requests + 1) × window_ms. Above 2^53
Go and Lua would disagree and limits would drift. The bound is engine.MaxExact, checked by
engine.Limit.Validate.

The engine enforces shares of a limit too, each with figures of its own and so a range of its
own: each sub-shard's (requests / sub_shards count), and, for a fail-open rule without a
failure.fallback, each gateway's as the default fallback (requests / gateways). 1,000,000,000 a
day is in range; a seventh of it, 142,857,142 a day, is not, as g falls from 86,400,000 to 2.

Fix: use a shorter window or a smaller burst, or pick requests and window with a large common
divisor.

Example:

    limits: [{requests: 7, window: "365d", burst: 100000000}]   // RL004`,
	}, perRule(checkExactRange)},
	{finding.Rule{
		ID: "RL005", Name: "lease-bounds", Severity: finding.Error,
		Summary: "A rule's minimum lease is above its maximum lease.",
		Help: `An enforcer leases B = clamp(min, observed_qps × lookahead, max) tokens at a time; with
min above max the clamp has no valid value.

The minimum may come from the domain's defaults or the built-in default (5), so a small
lease.max on one rule is enough.

Fix: make lease.min at most lease.max.

Example:

    lease: {min: 50, max: 20}                    // RL005
    lease: {max: 3}                              // RL005: the default min is 5`,
	}, nil},
	{finding.Rule{
		ID: "RL006", Name: "lease-stranding", Severity: finding.Warning,
		Summary: "gateways × max lease exceeds a limit's capacity, so idle gateways can strand the whole quota.",
		Help: `Leased tokens are debited from the bucket before they are spent. Each gateway may hold
up to lease.max unspent tokens until its lease expires; with gateways × lease.max above the
limit's capacity (burst), a caller spread over many gateways can find the bucket empty while
tokens sit idle elsewhere.

Fix: lower lease.max to at most capacity / gateways, or raise the burst.

Example:

    gateways: 50
    lease: max: 500
    limits: [{requests: 10000, window: "1m"}]    // RL006: 25000 tokens > capacity 10000`,
	}, perRule(checkStranding)},
	{finding.Rule{
		ID: "RL007", Name: "drift-over-tolerance", Severity: finding.Error,
		Summary: "Worst-case over-admission from leasing (gateways × max lease / requests) exceeds the rule's drift tolerance.",
		Help: `With N gateways each holding a lease of up to B tokens, a limit of R requests can
briefly admit up to N × B more than R. The rule's drift_tolerance (default 2%) says how much is
acceptable. The comparison is exact integer math in basis points.

Fix: lower lease.max to at most tolerance × requests / gateways, or raise drift_tolerance if the
over-admission is acceptable.

Example:

    gateways: 50
    lease: max: 24
    limits: [{requests: 50000, window: "1m"}]
    // RL007: drift 2.40% over tolerance 2.00%: 50 gateways × lease max 24 / 50000 requests`,
	}, perRule(checkDrift)},
	{finding.Rule{
		ID: "RL008", Name: "fail-open-critical", Severity: finding.Error,
		Summary: "A fail-open rule selects a path the domain marks critical.",
		Help: `While the store is unavailable a fail-open rule admits what its local bound allows
(its fallback, else twice each key's recent rate). On a path listed in the domain's critical_paths, such as payments, that is what an
attacker waits for. The check looks at the rule's match entries on path_match sources and on a
":path" header; rules that select no path are not reported.

Fix: set failure: {mode: "closed", reason: "..."} on the rule.

Example:

    critical_paths: ["/v1/payments*"]
    sources: payments: {kind: "path_match", value: "payments", prefix: "/v1/payments"}
    rules: pay: {match: [{key: "payments"}], failure: mode: "open"}   // RL008`,
	}, perRule(checkFailOpenCritical)},
	{finding.Rule{
		ID: "RL009", Name: "fail-closed-reason", Severity: finding.Warning,
		Summary: "A fail-closed rule has no reason.",
		Help: `A fail-closed rule rejects all of its traffic while the store is unavailable: a store
outage becomes an outage of that API. That can be right (payments), but it should be a decision
someone wrote down, so the on-call engineer knows why.

Fix: add failure.reason, or fail open with a fallback bucket.

Example:

    failure: {mode: "closed", reason: "card testing: never admit unmetered"}`,
	}, perRule(checkFailClosedReason)},
	{finding.Rule{
		ID: "RL010", Name: "per-ip-nat", Severity: finding.Warning,
		Summary: "A per-IP limit without subnet aggregation: everyone behind one NAT shares it.",
		Help: `Companies route thousands of employees through one NAT address, and mobile carriers put
whole neighbourhoods behind a few (CGNAT). A limit keyed on the full remote address blocks all
of them when one exceeds it, and does little against botnets that rotate addresses. The check
reports rules that match any value of a remote_address source (or the identity waterfall's
subnet tier) whose mask is "none".

Fix: set mask: "subnet" (/24 for IPv4, /64 for IPv6), or key the rule on an identity source.

Example:

    sources: ip: {kind: "remote_address", mask: "none"}
    rules: anon: match: [{key: "ip"}]            // RL010`,
	}, perRule(checkNATTrap)},
	{finding.Rule{
		ID: "RL011", Name: "hot-key", Severity: finding.Warning,
		Summary: "Expected peak QPS is over the domain's per-key budget and the rule has too few sub_shards.",
		Help: `One rate-limit key lives on one Redis slot, served by one core. A key expected to take
more QPS than the domain's gateway.per_key_qps_budget saturates that core, and latency rises for
every key on the node. Sub-sharding splits the key into count shard keys, each with 1/count of
the capacity.

Fix: add sub_shards with count ≥ expected_peak_qps / per_key_qps_budget and an attribute that
spreads callers (such as the client address).

Example:

    expected_peak_qps: 80000                     // budget 10000
    sub_shards: {count: 8, attribute: "ip"}`,
	}, perRule(checkHotKey)},
	{finding.Rule{
		ID: "RL012", Name: "store-timeout", Severity: finding.Error,
		Summary: "A rule's store timeout is not below the gateway's RLS timeout.",
		Help: `The enforcer waits at most store_timeout for the store, then applies the rule's failure
mode. If the gateway's own timeout for the rate limit call (gateway.rls_timeout) is not longer,
the gateway gives up first: the failure mode never applies and a slow store becomes gateway
errors.

Fix: make store_timeout clearly shorter than gateway.rls_timeout (default 5ms against 20ms).

Example:

    gateway: rls_timeout: "20ms"
    store_timeout: "25ms"                        // RL012`,
	}, perRule(checkStoreTimeout)},
	{finding.Rule{
		ID: "RL013", Name: "canary-percent", Severity: finding.Error,
		Summary: "A canary stage has no percentage of enforcer instances to enforce on.",
		Help: `The canary stage enforces on a share of enforcer instances and only warns on the rest;
without a percentage it is unclear how much traffic sees 429s.

Fix: set stage.percent from 1 to 100.

Example:

    stage: {name: "canary", percent: 5, since: "2025-03-01"}`,
	}, nil},
	{finding.Rule{
		ID: "RL014", Name: "stage-since", Severity: finding.Warning,
		Summary: "A rule in shadow, soft or canary has no start date.",
		Help: `Rollout gates ("seven days in shadow, then soft") count from the date a stage began.
Without stage.since, rlctl rollout cannot tell whether a rule is ready to advance, and reviewers
cannot tell how long it has been running. Enforce, the last stage, is not checked.

Fix: set stage.since to the date (YYYY-MM-DD) the stage began.

Example:

    stage: {name: "shadow", since: "2025-03-01"}`,
	}, perRule(checkStageSince)},
	{finding.Rule{
		ID: "RL015", Name: "region-shares", Severity: finding.Error,
		Summary: "A rule's region shares do not sum to 100%.",
		Help: `A global quota is sliced across regions so each enforces its share locally. Shares that
sum to less than 100% lose quota; more than 100% admit more than the limit.

Fix: make the shares sum to exactly 100.

Example:

    regions: {"us-east": 60, "eu-central": 30, "us-west": 10}`,
	}, perRule(checkRegions)},
	{finding.Rule{
		ID: "RL016", Name: "cost-over-capacity", Severity: finding.Error,
		Summary: "A limit's cost is above its capacity, so every request is rejected.",
		Help: `Each request spends cost tokens (default 1). A token bucket holds at most burst tokens
(default: requests); a sliding or fixed window admits at most requests per window. A cost above
that can never be paid, so the rule rejects every request, forever. A sub-sharded rule gives each
shard 1/count of the capacity, so the cost must fit one shard's share.

Fix: lower the cost, or raise burst (or requests).

Example:

    limits: [{requests: 10, window: "1s", cost: 100}]   // RL016: capacity 10`,
	}, perRule(checkCostCapacity)},
	{finding.Rule{
		ID: "RL017", Name: "low-watermark", Severity: finding.Warning,
		Summary: "A lease's low watermark, in tokens, is above the maximum lease.",
		Help: `An enforcer prefetches the next lease in the background when its local balance falls
below lease.low_watermark. A lease is at most lease.max tokens, so a watermark above that is never
reached from below: every request prefetches, and leasing saves no store calls.

Fix: set low_watermark below lease.max, or as a percentage of the lease such as "20%".

Example:

    lease: {max: 50, low_watermark: 80}         // RL017`,
	}, perRule(checkLowWatermark)},
	{finding.Rule{
		ID: "RL018", Name: "envoy-key-collision", Severity: finding.Warning,
		Summary: "Two match keys at one level collide on envoyproxy/ratelimit: one is the other plus \"_\" and more.",
		Help: `envoyproxy/ratelimit looks a descriptor entry up as key + "_" + value among the exact
matches of a level, then tries every wildcard of the level as a prefix of that string, whatever
its key. So at one level "user" with value "agent_x" and "user_agent" with value "x" are the same
entry there, and the wildcard user="a*" also takes user_agent entries. rlctl compares keys
exactly, so the policy behaves differently on the reference service: a migration to or from it
would change who is limited.

Fix: rename one of the keys (the source's field name) so that neither is the other plus "_".

Example:

    rules: u:  match: [{key: "user", value: "a*"}]
    rules: ua: match: [{key: "user_agent"}]     // RL018: "user_agent" is "user" + "_agent"`,
	}, checkEnvoyKeys},
	{finding.Rule{
		ID: "RL019", Name: "fail-open-no-fallback", Severity: finding.Warning,
		Summary: "A fail-open rule whose requests are expensive (a cost above 1) has no failure.fallback.",
		Help: `While the store is unavailable, a fail-open rule spends the tokens it has leased and then
admits up to a local bucket on each enforcer: its failure.fallback, or when it has none a default
of twice the key's recently admitted rate on that enforcer, or, for a key with no recent rate,
the rule's limit divided by its gateways (the whole limit on every gateway when gateways is not
set). The default is never unbounded, but it is sized from traffic, not from what the service
behind the rule can take. Where requests are cheap that is a fair guess; where they are
expensive the policy author should say.

A request is expensive when a limit of the rule has a cost above 1. Cost is the one figure in a
policy that says what a request is worth: above 1, one request spends several tokens (an export,
a search, a model call), and a cap guessed from traffic is the costliest to get wrong. The
capacity figures say something else: expected_peak_qps and sub_shards are about the store's load
on a hot key (RL011), not about what a request costs, and are not counted. A fail-open rule on a
path in critical_paths is RL008's error whatever its fallback (the fix there is to fail closed),
so it is not reported again here.

A rule's failure setting replaces the domain's defaults.failure as a whole: a rule that sets
failure: mode: "open" has no fallback, even when the defaults give one.

Fix: set failure.fallback to what the service can take from one enforcer, or fail closed with a
reason.

Example:

    rules: export: {
        limits: [{requests: 100, window: "1m", cost: 10}]
        failure: mode: "open"                    // RL019
    }
    failure: {mode: "open", fallback: {requests: 20, window: "1m"}}   // fixed`,
	}, perRule(checkFailOpenNoFallback)},
	{finding.Rule{
		ID: "RL027", Name: "path-with-query", Severity: finding.Warning,
		Summary: "A rule matches the :path header, whose value holds the query string.",
		Help: `Envoy's :path header is the path with its query string (/v1/orders?page=2), and a header
source passes it on whole. A caller chooses the query freely without changing what it asks for, so:

- an exact value ("/v1/payments/charge") no longer matches once the caller adds "?": the rule is
  skipped;
- a wildcard ("/catalog/*") or a key-only match keys the limit by the whole value: each query
  string is a key, and a bucket, of its own, so a caller who varies it is never limited.

A path_match source reads the path without that freedom: exact (the path with any query string or
none) or prefix, producing one descriptor value for all the requests it selects, so the limit is
one bucket per key of the rule's other entries.

Fix: give the path its own path_match source and match that key.

Example:

    sources: path: {kind: "header", header: ":path"}
    match: [{key: "tenant_id"}, {key: "path", value: "/catalog/*"}]      // RL027

    sources: catalog: {kind: "path_match", prefix: "/catalog/", value: "catalog"}
    match: [{key: "tenant_id"}, {key: "catalog"}]                        // fixed`,
	}, perRule(checkPathWithQuery)},
	{finding.Rule{
		ID: "RL028", Name: "shard-rounding", Severity: finding.Warning,
		Summary: "A sub-sharded limit whose shards admit (or whose bursts hold) over 1% less together than the limit.",
		Help: `A sub-sharded rule splits each limit among its shards: each holds requests / count, rounded
down to a whole request (and its burst likewise), because a shard's bucket counts whole tokens. When
requests is not a multiple of the count, the shards together admit less than the limit says: 31 a
second over 16 shards is 1 a shard, 16 a second in all. A burst set apart from requests is split
the same way. A loss of 1% or less (1,000 over 16 is 992) is not reported.

Fix: make requests (and burst) a multiple of sub_shards count, or use fewer shards.

Example:

    limits: [{requests: 31, window: "1s"}]
    sub_shards: {count: 16, attribute: "client_ip"}     // RL028: 16 a second, not 31
    limits: [{requests: 32, window: "1s"}]               // fixed`,
	}, perRule(checkShardRounding)},
	{finding.Rule{
		ID: "RL029", Name: "empty-domain", Severity: finding.Warning,
		Summary: "A domain defines no rules: every request naming it is admitted, unlimited.",
		Help: `A domain is what the gateway names in each ShouldRateLimit call. One without rules
limits nothing: the enforcer answers every call of it OK, and renders an envoyproxy/ratelimit
configuration with no descriptors. That is seldom meant; more often the rules were written under a
misspelt domain name (which then holds them, while the gateway's domain is empty), or were all
removed by mistake.

Fix: add the domain's rules, or remove the domain (the gateway's calls naming a domain no policy
defines are admitted too, and counted in rate_limit_unknown_domain_total).

Example:

    domains: edge: gateway: rls_timeout: "20ms"          // RL029: no rules
    domains: egde: rules: users: {...}                   // the rules, under a misspelt name`,
	}, checkEmptyDomain},
	{finding.Rule{
		ID: "RL030", Name: "literal-pattern", Severity: finding.Warning,
		Summary: "A match value reads as a pattern but is matched as it is: a '*' before its end, or a '|'.",
		Help: `Only a trailing * makes a match value a wildcard: "big*" is every value that starts with
"big". A * anywhere else, and a |, are characters like any other: "big*co" selects the one value
"big*co" (not "bigfooco"), and "bigco|megacorp" the one value with the bar in it. Such a rule
almost never matches, and what it was meant to limit goes to another rule, or none.

Fix: one rule per value, or a prefix.

Example:

    match: [{key: "tenant", value: "bigco|megacorp"}]     // RL030
    match: [{key: "tenant", value: "bigco"}]              // fixed, and a second rule for megacorp`,
	}, perRule(checkLiteralPattern)},
}
