package render

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/rlctl/rlctl/policy"
)

func init() { register(prometheusTarget) }

// PrometheusFile is the name of the prometheus target's one file.
const PrometheusFile = "rlctl-alerts.yaml"

// The alerts' thresholds. They are constants, stated in the rendered file's header and the
// README; a team that wants others edits its copy of the file.
const (
	// bypassPercent is the seed's page: requests admitted without the store's say, as a
	// percentage of the domain's traffic, over bypassWindow, held for bypassFor.
	// The window is two minutes so that it holds at least two samples at the slowest scrape
	// interval the header allows (30s); one minute could hold one, and rate() needs two.
	bypassPercent = 0.5
	bypassWindow  = "2m"
	bypassFor     = "1m"
	// The breaker has been open or half-open (probing), and refusing store calls, at every
	// evaluation for breakerFor.
	breakerFor = "1m"
	// breakerFlaps is how many times the breaker opened within breakerFlapWindow: a store that
	// fails every other minute never holds the breaker open for breakerFor.
	breakerFlaps      = 3
	breakerFlapWindow = "10m"
	// failedClosedWindow and failedClosedFor: fail-closed rules' descriptors met an unavailable
	// store (decision="failed_closed").
	failedClosedWindow = "2m"
	failedClosedFor    = "1m"
	// An instance that exported the enforcer's metrics within downLookback, and whose scrape
	// has failed for downFor. The lookback is how the alert knows an enforcer's target without
	// knowing the scrape job's name; once the alert is pending or firing, its own ALERTS series
	// keeps the instance matched for as long as it stays down, however long that is.
	downFor      = "2m"
	downLookback = "6h"
	// unknownDomainWindow and unknownDomainFor: calls naming a domain no policy defines.
	unknownDomainWindow = "5m"
	unknownDomainFor    = "5m"
	// xdsFor: an enforcer subscribed over xDS without a stream to its server.
	xdsFor = "5m"
	// A failed reload or a dropped journal record keeps its alert firing for eventWindow.
	eventWindow = "10m"
	// wouldDenyPercent is the share of a shadow or soft rule's traffic that it would deny once
	// enforced, averaged over wouldDenyWindow and held for wouldDenyFor: long enough that one
	// burst of a single client does not warn, short enough to see a day's pattern. Nothing is
	// denied yet, so it is a warning for the rule's owner, not a page.
	wouldDenyPercent = 1.0
	wouldDenyWindow  = "10m"
	wouldDenyFor     = "15m"
)

// Alert group names.
const (
	enforcerGroup = "rlctl-enforcer"
	rolloutGroup  = "rlctl-rollout"
)

// prometheusTarget renders Prometheus alerting rules on the enforcer's metrics
// (enforcer/metrics.go): the store bypass page, the circuit breaker, failed reloads, journal
// drops, and one alert per shadow or soft rule on the share of its traffic it would deny.
var prometheusTarget = Target{
	Name:    "prometheus",
	Formats: []string{"yaml"},
	Doc:     "Prometheus alerting rules on rlctl-enforcer's metrics (" + PrometheusFile + ")",
	render:  renderPrometheus,
}

// promRuleFile is Prometheus's rule file format (the subset rendered here).
type promRuleFile struct {
	Groups []promGroup `yaml:"groups"`
}

type promGroup struct {
	Name  string      `yaml:"name"`
	Rules []promAlert `yaml:"rules"`
}

// promAlert is one alerting rule. yaml.v3 writes map keys sorted, so labels are in a stable
// order.
type promAlert struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations promAnnotations   `yaml:"annotations"`
}

// promAnnotations are Go templates that Prometheus expands with the alert's series: $labels
// holds the expression's labels, not the rule's own.
type promAnnotations struct {
	Summary     string `yaml:"summary"`
	Description string `yaml:"description"`
}

// prometheusHeader heads the file: what it is, what it needs, and its thresholds.
var prometheusHeader = fmt.Sprintf(`# Prometheus alerting rules for rlctl-enforcer, rendered by rlctl render --target prometheus.
# Do not edit: change the policy and render again. Check with: promtool check rules FILE
#
# The rates need the enforcer's /metrics scraped at least every 30s (15s recommended).
# Thresholds:
#   RateLimitEnforcerDown        an enforcer's /metrics could not be scraped for %s (critical)
#   RateLimitBypassed            > %s%% of a domain's requests bypass the store, over %s, for %s (critical)
#   RateLimitFailingClosed       a fail-closed rule's descriptors meet an unavailable store, over %s,
#                                for %s (critical; rules in shadow or soft, which admit them, left out)
#   RateLimitBreakerOpen         the store circuit breaker not closed, and refusing store calls, for %s
#                                (critical when the policy has a fail-closed rule, else warning)
#   RateLimitBreakerFlapping     the breaker opened %d times or more in %s (as RateLimitBreakerOpen)
#   RateLimitConfigReloadFailed  the last snapshot load was rejected, until a good one loads (warning)
#   RateLimitXDSDisconnected     an enforcer subscribed over xDS has had no stream for %s (warning)
#   RateLimitUnknownDomain       calls name a domain no policy defines, over %s, for %s (warning)
#   RateLimitJournalDropped      a dropped journal record in the last %s (warning)
#   RateLimitRuleWouldDeny       a shadow or soft rule would deny > %s%% of its traffic, over %s,
#                                for %s (warning), one alert per rule
`, downFor, percent(bypassPercent), bypassWindow, bypassFor, failedClosedWindow, failedClosedFor, breakerFor,
	breakerFlaps, breakerFlapWindow, xdsFor, unknownDomainWindow, unknownDomainFor, eventWindow,
	percent(wouldDenyPercent), wouldDenyWindow, wouldDenyFor)

// renderPrometheus renders m as one rule file: the enforcer's group, then the rollout group when
// some rule is in shadow or soft.
func renderPrometheus(m *policy.Model, _ Options) (Result, error) {
	file := promRuleFile{Groups: []promGroup{{Name: enforcerGroup, Rules: enforcerAlerts(m)}}}
	if rs := rolloutAlerts(m); len(rs) > 0 {
		file.Groups = append(file.Groups, promGroup{Name: rolloutGroup, Rules: rs})
	}
	var buf bytes.Buffer
	buf.WriteString(prometheusHeader)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(file); err != nil {
		return Result{}, fmt.Errorf("prometheus: %w", err)
	}
	if err := enc.Close(); err != nil {
		return Result{}, fmt.Errorf("prometheus: %w", err)
	}
	return Result{
		Files: []File{{Name: PrometheusFile, Data: buf.Bytes()}},
		Findings: []Finding{{Severity: Assumption, Message: "the alerts assume the enforcer's /metrics " +
			"is scraped at least every 30s: RateLimitBypassed takes a rate over " + bypassWindow + ", which needs two samples"}},
	}, nil
}

// enforcerAlerts are the alerts on the enforcer itself. They are the same for every policy but
// for the breaker's severity and description.
func enforcerAlerts(m *policy.Model) []promAlert {
	bypassed := promAlert{
		Alert: "RateLimitBypassed",
		Expr: "sum by (domain) (rate(rate_limit_bypassed_total[" + bypassWindow + "]))\n" +
			"  /\n" +
			"sum by (domain) (rate(rate_limit_requests_total[" + bypassWindow + "]))\n" +
			"  > " + share(bypassPercent),
		For:    bypassFor,
		Labels: map[string]string{"severity": "critical"},
		Annotations: promAnnotations{
			Summary: "Domain {{ $labels.domain }}: {{ $value | humanizePercentage }} of requests are admitted without the rate-limit store",
			Description: "rate_limit_bypassed_total (every reason: redis_circuit_open, store_error) has been above " +
				percent(bypassPercent) + "% of the domain's decided descriptors (rate_limit_requests_total) for " + bypassFor + ". " +
				"Fail-open rules are admitting on their local fallback buckets, so their limits are not " +
				"enforced across the fleet. Check the store (Redis) and RateLimitBreakerOpen.",
		},
	}

	// The breaker's gauge moves on store calls only, so an instance that makes none keeps the
	// state of its last: the alert holds while the breaker refuses calls.
	breaker := promAlert{
		Alert: "RateLimitBreakerOpen",
		Expr: "rate_limit_breaker_state > 0\n" +
			"  and on (job, instance)\n" +
			"sum by (job, instance) (increase(rate_limit_store_calls_total{op=\"take\", result=\"circuit_open\"}[" + bypassWindow + "])) > 0",
		For:    breakerFor,
		Labels: map[string]string{"severity": "warning"},
		Annotations: promAnnotations{
			Summary: "rlctl-enforcer {{ $labels.instance }}: the store circuit breaker has not closed for " + breakerFor,
		},
	}
	impact := "This policy has no fail-closed rule. "
	if closed := failClosedRules(m); len(closed) > 0 {
		// A fail-closed rule denies what its leased tokens do not cover: an open breaker is an
		// outage of those routes on this instance.
		breaker.Labels["severity"] = "critical"
		impact = "Fail-closed rules deny beyond their leased tokens on this instance: " +
			templateText(strings.Join(closed, ", ")) + ". "
	}
	breaker.Annotations.Description = "Store calls failed or timed out and the breaker stays open (or half-open, probing). " +
		impact + "Fail-open rules admit up to their local fallback " +
		"bucket (see RateLimitBypassed). The gauge moves on the next store call, so an idle instance " +
		"reports the state of its last one; the alert holds only while the breaker refuses calls."
	flapping := promAlert{
		Alert: "RateLimitBreakerFlapping",
		Expr: "sum by (job, instance) (increase(rate_limit_breaker_transitions_total{to=\"open\"}[" + breakerFlapWindow + "]))\n" +
			"  >= " + strconv.Itoa(breakerFlaps),
		Labels: map[string]string{"severity": breaker.Labels["severity"]},
		Annotations: promAnnotations{
			Summary: "rlctl-enforcer {{ $labels.instance }}: the store circuit breaker opened " + strconv.Itoa(breakerFlaps) +
				" times or more in the last " + breakerFlapWindow,
			Description: "The store fails often enough to open the breaker again and again, but never for " + breakerFor +
				" on end, so RateLimitBreakerOpen stays silent. While it is open: " + impact +
				"Check the store (Redis): its latency against the rules' store_timeout, and its errors in the enforcer's log.",
		},
	}
	failingClosed := promAlert{
		Alert:  "RateLimitFailingClosed",
		Expr:   failingClosedExpr(m),
		For:    failedClosedFor,
		Labels: map[string]string{"severity": "critical"},
		Annotations: promAnnotations{
			Summary: "Rule {{ $labels.domain }}/{{ $labels.rule }}: {{ $value | humanize }} descriptors a second meet an unavailable store and fail closed",
			Description: "The store (Redis) could not decide, and this rule fails closed (its failure mode, or the " +
				"call's " + policy.FailureModeHeader + " header): its requests get 429 beyond the tokens already leased " +
				"(at the enforce stage, and on a canary's enforcing share; shadow and soft rules admit them, and the " +
				"alert leaves them out). These are counted as decision=\"failed_closed\", not as over the limit. " +
				"Check the store and RateLimitBreakerOpen.",
		},
	}
	down := promAlert{
		Alert: "RateLimitEnforcerDown",
		Expr: "up == 0\n" +
			"  and on (job, instance)\n" +
			"(\n" +
			"  max_over_time(rate_limit_breaker_state[" + downLookback + "])\n" +
			"    or\n" +
			"  ALERTS{alertname=\"RateLimitEnforcerDown\"}\n" +
			")",
		For:    downFor,
		Labels: map[string]string{"severity": "critical"},
		Annotations: promAnnotations{
			Summary: "rlctl-enforcer {{ $labels.instance }} ({{ $labels.job }}): /metrics could not be scraped for " + downFor,
			Description: "Prometheus cannot scrape an instance that exported rlctl-enforcer's metrics in the last " + downLookback +
				": the process is down or unreachable, and the gateway beside it applies its rate-limit filter's " +
				"failure mode (failure_mode_deny) to every request. The alert goes on while the instance stays " +
				"down; one that its service discovery removed has no target left to alert on.",
		},
	}
	xds := promAlert{
		Alert:  "RateLimitXDSDisconnected",
		Expr:   "rate_limit_xds_connected == 0",
		For:    xdsFor,
		Labels: map[string]string{"severity": "warning"},
		Annotations: promAnnotations{
			Summary: "rlctl-enforcer {{ $labels.instance }}: no stream to its xDS server for " + xdsFor,
			Description: "The enforcer is subscribed over --xds and has not had a stream to the server for " + xdsFor +
				". It keeps serving the last snapshot it received (rate_limit_config_info), so policy changes do not " +
				"reach it. Check rlctl serve-xds and the network between them.",
		},
	}
	unknown := promAlert{
		Alert: "RateLimitUnknownDomain",
		Expr: "sum by (job, domain) (rate(rate_limit_unknown_domain_total[" + unknownDomainWindow + "]))\n" +
			"  > 0",
		For:    unknownDomainFor,
		Labels: map[string]string{"severity": "warning"},
		Annotations: promAnnotations{
			Summary: "Calls name the rate-limit domain {{ $labels.domain }}, which no loaded policy defines",
			Description: "The enforcer answers OK, without limiting, to calls naming a domain it does not know, as " +
				"envoyproxy/ratelimit does: a misspelt domain in Envoy's rate-limit filter turns limiting off. " +
				"Compare the filter's domain with the policy's (rlctl render --target envoy).",
		},
	}

	return []promAlert{
		down,
		bypassed,
		failingClosed,
		breaker,
		flapping,
		{
			Alert:  "RateLimitConfigReloadFailed",
			Expr:   `rate_limit_config_last_reload_successful == 0`,
			Labels: map[string]string{"severity": "warning"},
			Annotations: promAnnotations{
				Summary: "rlctl-enforcer {{ $labels.instance }}: the last policy snapshot it was asked to load was rejected",
				Description: "The enforcer refused a snapshot it was asked to load; the previous config keeps " +
					"serving (rate_limit_config_info shows its version) until a good one loads, and the alert " +
					"stays on until then. The enforcer's log names the error.",
			},
		},
		xds,
		unknown,
		{
			Alert:  "RateLimitJournalDropped",
			Expr:   "increase(rate_limit_journal_dropped_total[" + eventWindow + "]) > 0",
			Labels: map[string]string{"severity": "warning"},
			Annotations: promAnnotations{
				Summary: "rlctl-enforcer {{ $labels.instance }}: the decision journal dropped {{ $value | humanize }} records in the last " + eventWindow,
				Description: "The journal lost records (its writer fell behind the disk, or the disk refused " +
					"them: full or failing), so a replay of this journal is not exact. Give the journal room and a " +
					"faster disk, or run with --journal-block.",
			},
		},
	}
}

// rolloutAlerts are one RateLimitRuleWouldDeny alert per rule in the shadow or soft stage, by
// domain and rule name: the share of the descriptors the rule matched that were over its limit,
// and would be denied once it is enforced.
func rolloutAlerts(m *policy.Model) []promAlert {
	type staged struct {
		domain string
		rule   *policy.Rule
	}
	var rules []staged
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			if r.Stage.Name == policy.StageShadow || r.Stage.Name == policy.StageSoft {
				rules = append(rules, staged{d.Name, r})
			}
		}
	}
	// By name, not precedence: reordering rules leaves the file as it was.
	slices.SortFunc(rules, func(a, b staged) int {
		return cmp.Or(strings.Compare(a.domain, b.domain), strings.Compare(a.rule.Name, b.rule.Name))
	})
	var alerts []promAlert
	for _, s := range rules {
		sel := "domain=" + strconv.Quote(s.domain) + ", rule=" + strconv.Quote(s.rule.Name)
		stage := string(s.rule.Stage.Name)
		labels := map[string]string{"severity": "warning", "stage": stage}
		if s.rule.Owner != "" {
			labels["owner"] = templateText(s.rule.Owner)
		}
		// Both over-limit decisions count, so that the alert holds while the fleet reloads from
		// one stage to the next.
		alerts = append(alerts, promAlert{
			Alert: "RateLimitRuleWouldDeny",
			Expr: "sum by (domain, rule) (rate(rate_limit_requests_total{" + sel + `, decision=~"shadow_over|soft_over"}[` + wouldDenyWindow + "]))\n" +
				"  /\n" +
				"sum by (domain, rule) (rate(rate_limit_requests_total{" + sel + "}[" + wouldDenyWindow + "]))\n" +
				"  > " + share(wouldDenyPercent),
			For:    wouldDenyFor,
			Labels: labels,
			Annotations: promAnnotations{
				Summary: "Rule {{ $labels.domain }}/{{ $labels.rule }} (" + stage + ") would deny {{ $value | humanizePercentage }} of its traffic",
				Description: "Over the last " + wouldDenyWindow + ", more than " + percent(wouldDenyPercent) +
					"% of the descriptors this " + stage + "-stage rule matched were over its limit. " +
					"They were admitted; once the rule is enforced they get 429. Find out whose they are " +
					"(rlctl simulate, the shadow block events) before promoting the rule.",
			},
		})
	}
	return alerts
}

// failingClosedExpr is RateLimitFailingClosed's expression: the failed_closed decisions of every
// rule but those in the shadow or soft stage, which admit them. The stages are the policy's, as
// RateLimitRuleWouldDeny's are: the alerts are rendered again when a rule moves on.
func failingClosedExpr(m *policy.Model) string {
	sel := func(extra string) string {
		return "rate(rate_limit_requests_total{decision=\"failed_closed\"" + extra + "}[" + failedClosedWindow + "])"
	}
	var quiet []string // domains with shadow or soft rules
	var parts []string
	for _, d := range m.Domains {
		var admit []string
		for _, r := range d.Rules {
			if r.Stage.Name == policy.StageShadow || r.Stage.Name == policy.StageSoft {
				admit = append(admit, regexp.QuoteMeta(r.Name))
			}
		}
		if len(admit) == 0 {
			continue
		}
		slices.Sort(admit)
		quiet = append(quiet, regexp.QuoteMeta(d.Name))
		parts = append(parts, sel(", domain="+strconv.Quote(d.Name)+", rule!~"+strconv.Quote(strings.Join(admit, "|"))))
	}
	if len(quiet) == 0 {
		return "sum by (domain, rule) (" + sel("") + ")\n  > 0"
	}
	slices.Sort(quiet)
	parts = append([]string{sel(", domain!~" + strconv.Quote(strings.Join(quiet, "|")))}, parts...)
	return "sum by (domain, rule) (\n    " + strings.Join(parts, "\n  or\n    ") + "\n)\n  > 0"
}

// failClosedRules names the fail-closed rules of m as "domain/rule", in model order.
func failClosedRules(m *policy.Model) []string {
	var names []string
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			if r.FailureMode == policy.FailClosed {
				names = append(names, d.Name+"/"+r.Name)
			}
		}
	}
	return names
}

// percent formats a percentage such as 0.5 for text; share formats it as the fraction PromQL
// compares with (0.005).
func percent(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }
func share(p float64) string   { return strconv.FormatFloat(p/100, 'f', -1, 64) }

// templateText makes s literal text in a Prometheus label or annotation, which Prometheus
// expands as a Go template: text holding "{{" becomes a template that prints it.
func templateText(s string) string {
	if !strings.Contains(s, "{{") {
		return s
	}
	return "{{ " + strconv.Quote(s) + " }}"
}
