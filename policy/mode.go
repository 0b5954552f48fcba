package policy

// Mode is what a rule does with an over-limit verdict on one enforcer instance: the effect of
// its rollout stage there.
type Mode uint8

// The modes.
const (
	ModeEnforce Mode = iota // reject
	ModeSoft                // admit, with a RateLimit-Warning header
	ModeShadow              // admit, and count and log a shadow block
)

var modeNames = [...]string{"enforce", "soft", "shadow"}

// String returns the mode's name, for example "soft".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "mode(?)"
}

// Valid reports whether n is a rollout stage, or empty (which means enforce).
func (n StageName) Valid() bool {
	switch n {
	case StageShadow, StageSoft, StageCanary, StageEnforce, "":
		return true
	}
	return false
}

// CanaryBucket places an enforcer instance in [0, 100): the 64-bit FNV-1a hash of its ID, modulo
// 100. An instance enforces a canary rule when its bucket is below the rule's percent. The hash
// is stable, so an instance keeps its membership across restarts and reloads, and raising the
// percent only adds instances. Simulate places its virtual gateways by name the same way.
func CanaryBucket(instanceID string) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(instanceID); i++ {
		h ^= uint64(instanceID[i])
		h *= 1099511628211
	}
	return int(h % 100)
}

// Mode returns what r does on the enforcer instance instanceID: the shadow and soft stages are
// their modes, a canary stage enforces on the instances whose CanaryBucket is below its percent
// and is soft elsewhere, and enforce enforces. An empty or unknown stage enforces (see
// StageName.Valid).
func (r *Rule) Mode(instanceID string) Mode {
	switch r.Stage.Name {
	case StageShadow:
		return ModeShadow
	case StageSoft:
		return ModeSoft
	case StageCanary:
		if CanaryBucket(instanceID) < r.Stage.CanaryPercent {
			return ModeEnforce
		}
		return ModeSoft
	}
	return ModeEnforce
}
