package secrets

import (
	"context"
	"errors"

	"github.com/botbox/botbox/internal/volwatch"
)

// Run keeps the store in sync with its directory until ctx is done, then
// returns nil. It returns an error only if the store is already running.
//
// The directory is watched by package volwatch: any event inside it
// schedules one reload after Options.Debounce; every Options.Resync the
// whole directory is re-read regardless. The watch follows the directory
// when it is created late, removed or replaced; without fsnotify, the
// resync alone keeps the store current.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("secrets store is already running")
	}
	defer s.running.Store(false)
	return volwatch.Run(ctx, s.watchOptions())
}

// watchOptions are the volwatch options of Run.
func (s *Store) watchOptions() volwatch.Options {
	return volwatch.Options{
		Dir:      s.dir,
		Debounce: s.debounce,
		Resync:   s.resync,
		Logger:   s.log,
		Reload: func(trigger string) {
			if trigger == volwatch.TriggerEvent {
				s.log.Info("reloading secrets due to file change")
			}
			s.reload(trigger)
		},
	}
}
