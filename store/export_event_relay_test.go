package store

// OnTake has fn called with how many events, and how many bytes of them
// (RelayConfig.MaxBytes's measure), each batch of the relay read: what
// the byte budget test observes. Set it before the relay runs.
func (r *Relay) OnTake(fn func(events int, bytes int64)) { r.took = fn }
