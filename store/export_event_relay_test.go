package store

import "time"

// OnTake has fn called with how many events, and how many bytes of them
// (RelayConfig.MaxBytes's measure), each batch of the relay read: what
// the byte budget test observes. Set it before the relay runs.
func (r *Relay) OnTake(fn func(events int, bytes int64)) { r.took = fn }

// StayAwakeFor has the relay stay awake for d after the last events it
// found (relayAwakeIdle). Set it before the relay runs.
func (r *Relay) StayAwakeFor(d time.Duration) { r.awakeIdle = d }
