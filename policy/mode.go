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

// stageOrder is the rollout order; a stage's index is its position.
var stageOrder = [...]StageName{StageShadow, StageSoft, StageCanary, StageEnforce}

// Index returns n's position in the rollout order: shadow 0, soft 1, canary 2, enforce 3, and -1
// for anything else (the empty name included).
func (n StageName) Index() int {
	for i, s := range stageOrder {
		if s == n {
			return i
		}
	}
	return -1
}

// Next returns the stage after n, and false when n is enforce (the last stage) or not a stage.
func (n StageName) Next() (StageName, bool) {
	i := n.Index()
	if i < 0 || i+1 >= len(stageOrder) {
		return "", false
	}
	return stageOrder[i+1], true
}

// Dwell returns the least time, in ms, a rule of d stays in stage before it advances: the
// domain's shadow and soft dwells (Governance), and 0 for canary and enforce. Canary has no
// minimum of its own: how long it runs is the rollout gates' decision, on evidence.
func (d *Domain) Dwell(stage StageName) int64 {
	switch stage {
	case StageShadow:
		return d.Governance.ShadowDwellMs
	case StageSoft:
		return d.Governance.SoftDwellMs
	}
	return 0
}
