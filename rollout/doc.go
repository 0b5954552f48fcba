// Package rollout owns staged rollouts: where each rule is, what gates its next stage, and the
// edits and pull requests that advance it.
package rollout
