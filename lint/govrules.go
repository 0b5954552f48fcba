package lint

import "github.com/rlctl/rlctl/finding"

// governanceChecks are the governance rules in ID order, after checks. They compare a change with
// its base, so Lint does not run them; Governance does (rlctl lint --base). IDs are public API:
// never renumber or reuse one.
var governanceChecks = []govCheck{
	{finding.Rule{
		ID: "RL020", Name: "enter-at-shadow", Severity: finding.Error,
		Summary: "A new rule, or a rule whose limit got tighter, does not enter at shadow (with --base).",
		Help: `Outages happen when a limit that is too tight goes straight to production. A rule the
base does not have, or whose limit the change makes tighter, starts in the shadow stage, where it
is evaluated and counted but never rejects, so its false positives show before anyone is blocked.

A limit is tighter when its rate (requests per window, compared exactly) or its burst is lower
than the base's limit it pairs with (the one of the same window, of its family first, as rlctl diff pairs them), or
when the rule gains a limit. Rates are compared as what one key gets: in requests of the rule's
cost, in one sub-shard (a key whose traffic comes from one attribute value gets one shard's
share), so 100/1s becoming 100/1s at cost 2, or over 4 sub_shards, is tighter, and 500/1s at
cost 5 is not. A rule is tighter too when its match selects requests the base's did not (a
wider wildcard, any value for an exact one: those requests meet a limit they had not), and when
the source of one of its keys produces values otherwise (a path_match prefix that takes more
paths, an address mask that puts a /24 in one bucket). A key renamed with its source unchanged
is no change. And a rule
moved ahead of another whose wildcard competes with its own ("/v1/*" and "/v1/orders*"), or left
first when such a rule is removed or narrowed, takes the values both match, which lookup gives to the rule
declared first: when its limits are tighter than that rule's, those requests are limited harder.

A rule is the same rule as a base rule with its name or, failing that, with its match (a
rename). A domain may opt out, for example for an internal API, with governance:
{new_rules_at_shadow: false, opt_out_reason: "..."}, at base and at head: an opt-out takes
effect from the change after the one that adds it, so that a change cannot opt out of the check
it is judged by.

Runs with rlctl lint --base only.

Fix: set stage: {name: "shadow", since: "<today>"} on the rule, and let rlctl rollout promote it.

Example:

    // base: limits: [{requests: 200, window: "1s"}], stage enforce
    limits: [{requests: 150, window: "1s"}]     // RL020: tightened by 25% at "enforce"
    stage: {name: "shadow", since: "2025-06-02"} // fixed`,
	}, checkEnterAtShadow},
	{finding.Rule{
		ID: "RL021", Name: "stage-skip", Severity: finding.Error,
		Summary: "A rule advances more than one stage at once (with --base).",
		Help: `A rule rolls out shadow → soft → canary → enforce, one stage per change, so that callers
see warnings (soft) and a share of the fleet enforces (canary) before every gateway rejects.
Going back to any earlier stage is a rollback and is always allowed. A rule without a stage is
at enforce.

Runs with rlctl lint --base only.

Fix: advance to the next stage only (rlctl rollout promote does).

Example:

    // base: stage: {name: "shadow", since: "2025-06-02"}
    stage: {name: "canary", percent: 5, since: "2025-06-20"}   // RL021: skips "soft"`,
	}, checkStageSkip},
	{finding.Rule{
		ID: "RL022", Name: "stage-dwell", Severity: finding.Error,
		Summary: "A rule leaves shadow or soft before its minimum dwell (with --base).",
		Help: `A rule stays in shadow, then in soft, long enough for its evidence to mean something:
7 days each by default, counted in whole days from the base stage's since to the day of the
check (--today, default today in UTC). The domain sets other dwells with governance: dwell:
{shadow: "14d", soft: "3d"} ("0d" for no minimum; a dwell that is not whole days rounds up to
the next day). The longer of the base's and the head's dwell applies, so a change cannot
shorten the dwell it is judged by. Canary has no minimum dwell: the rollout gates decide.

A rule that leaves a stage whose base has no since is reported too: its dwell cannot be counted.

Runs with rlctl lint --base only.

Fix: wait until the dwell has passed, or change the domain's dwell in a reviewed change of its
own.

Example:

    // base: stage: {name: "shadow", since: "2025-06-02"}; today 2025-06-05
    stage: {name: "soft", since: "2025-06-05"}  // RL022: 3 days in shadow, want 7d`,
	}, checkDwell},
	{finding.Rule{
		ID: "RL023", Name: "since-not-updated", Severity: finding.Error,
		Summary: "A stage change keeps (or moves back) its since, or since moves back within a stage (with --base).",
		Help: `A stage's since is the day it began; dwell and rollout gates count from it. When the
stage changes (forward or back), since must become the day the new stage began, after the
base's since, or the same day when that is today (a stage left on the day it began). Within one
stage since must not move back: that would count dwell that did not happen. Moving it forward
(restarting the dwell) is allowed.

Runs with rlctl lint --base only.

Fix: set since to the day of the change (rlctl rollout promote does).

Example:

    // base: stage: {name: "shadow", since: "2025-06-02"}
    stage: {name: "soft", since: "2025-06-02"}  // RL023: since unchanged`,
	}, checkSinceUpdated},
	{finding.Rule{
		ID: "RL024", Name: "since-future", Severity: finding.Error,
		Summary: "A stage's since is after today (with --base).",
		Help: `A since in the future makes the dwell look shorter than it is today and longer than it
will have been, and a rollout plan cannot count from it. Today is --today (YYYY-MM-DD, default
today in UTC).

Runs with rlctl lint --base only.

Fix: set since to the day the stage began, today at the latest.

Example:

    // today 2025-06-05
    stage: {name: "shadow", since: "2025-06-30"} // RL024`,
	}, checkSinceFuture},
	{finding.Rule{
		ID: "RL025", Name: "critical-fail-open-reason", Severity: finding.Error,
		Summary: "A rule on a critical path goes from fail-closed to fail-open without a reason (with --base).",
		Help: `A rule that fails closed on a critical path (the domain's critical_paths, judged as
RL008 judges them) protects it while the store is unavailable. Making it fail open is a decision
someone must write down: the rule's reason field says why, and reviewers see it in the change.
The rule counts as on a critical path when it is at base or at head, so removing the path from
critical_paths in the same change does not avoid the check. RL008 still reports a fail-open rule
on a path that head marks critical.

Runs with rlctl lint --base only.

Fix: add reason: "..." to the rule, or keep it fail-closed.

Example:

    // base: failure: {mode: "closed", reason: "card testing"}
    failure: {mode: "open", fallback: {requests: 100, window: "1s"}}
    reason: "payments moved to the ledger's own limiter (INC-2291)"`,
	}, checkCriticalFailOpen},
	{finding.Rule{
		ID: "RL026", Name: "critical-removed-reason", Severity: finding.Error,
		Summary: "A rule on a critical path is removed without a reason in governance.removed (with --base).",
		Help: `Removing a rule that limits a critical path (judged at base, as RL008 judges it) takes
its protection away. A removed rule has no fields left to hold a reason, so the domain's
governance block holds it, by rule name. The finding is at the domain's governance block (its
first declaration when it has none). A rule that keeps its match under a new name is renamed,
not removed. Removing a whole domain with such rules is reported too: remove the rules first,
with reasons, then the domain.

Runs with rlctl lint --base only.

Fix: add the rule's name and the reason to governance.removed.

Example:

    governance: removed: pay_legacy: "merged into pay (INC-2291)"`,
	}, checkCriticalRemoved},
	{finding.Rule{
		ID: "RL031", Name: "counts-reset", Severity: finding.Warning,
		Summary: "A change gives every key of a rule a fresh allowance: the rule renamed, its descriptor keys or sub-shards changed, or a limit's family (with --base).",
		Help: `The store keeps a key's counts under a name made of the rule's domain and name, the
descriptor keys it matches with their values, and for a sub-sharded rule the sub-shard. A change
to any of those names other keys: every key of the rule starts with a full allowance once, as if
the rule were new, while the counts under the old names wait out their TTL. A client at its
limit gets that limit again at once. With more sub-shards, each takes a smaller share, and the
keys of the new ones start full (2 sub-shards becoming 4 admitted 1,500 of an hour's 1,000).
A limit whose algorithm's family changes (a token bucket becoming a window, or back) starts
afresh too. Adding, removing or reordering limits keeps the other limits' counts: a limit's
state is stored under its window and family, not its place in the list.

Runs with rlctl lint --base only.

Fix: keep the rule's name, keys and sub-shards, or make the change when a fresh allowance for
every key does no harm (a quiet hour, or with the rule in shadow).

Example:

    // base: orders_per_tenant: {match: [{key: "tenant"}], ...}
    per_tenant_orders: {match: [{key: "tenant"}], ...}  // RL031: renamed from "orders_per_tenant"`,
	}, checkCountsReset},
}
