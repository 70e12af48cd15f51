package server

import (
	"fmt"
	"log/slog"

	"github.com/botbox/botbox/internal/config"
	"github.com/botbox/botbox/internal/placeholder"
	"github.com/botbox/botbox/internal/proxy"
	"github.com/botbox/botbox/internal/telemetry"
)

// openPlaceholders opens placeholders.dir and writes the placeholders of
// the policy's secret_refs from the secrets loaded at start, when
// placeholders are enabled. A directory or key that cannot be used, or a
// file that cannot be written, stops the start: the app would run without
// its placeholders.
func (s *Server) openPlaceholders(cfg *config.Config) error {
	if !cfg.Placeholders.Enabled {
		return nil
	}
	m, err := placeholder.Open(placeholder.Options{
		Dir:    cfg.Placeholders.Dir,
		Logger: telemetry.WithTarget(s.opts.Logger, telemetry.TargetSecrets),
	})
	if err != nil {
		return fmt.Errorf("placeholders.dir %s: %w", cfg.Placeholders.Dir, err)
	}
	m.SetAliases(cfg.PlaceholderAliases())
	if err := m.Update(cfg.PlaceholderRefs(), s.store.Snapshot()); err != nil {
		return fmt.Errorf("placeholders.dir %s: %w", cfg.Placeholders.Dir, err)
	}
	s.placeholders = m
	s.logger.Info("placeholders written", slog.String(telemetry.KeyDir, cfg.Placeholders.Dir), slog.Int(telemetry.KeyPlaceholders, m.Table().Len()))
	return nil
}

// placeholderSource is the proxy's view of the placeholders: nil (not a
// typed nil) when they are off.
func (s *Server) placeholderSource() proxy.PlaceholderSource {
	if s.placeholders == nil {
		return nil
	}
	return s.placeholders
}

// Placeholders returns the placeholder manager, nil when placeholders are
// off: its InspectName is the hook of a DNS guard.
func (s *Server) Placeholders() *placeholder.Manager { return s.placeholders }

// refreshPlaceholders re-derives after a secret rotation (secrets.Options.OnChange).
func (s *Server) refreshPlaceholders() {
	if s.placeholders == nil {
		return
	}
	if err := s.placeholders.Refresh(s.store.Snapshot()); err != nil {
		s.logger.Error("placeholder files could not be updated; the tripwire uses the new placeholders", slog.String(telemetry.KeyError, err.Error()))
	}
}

// updatePlaceholders follows a configuration reload's secret_refs (and
// the AWS env names of its credentials).
func (s *Server) updatePlaceholders(refs []string, aliases map[string]string) {
	if s.placeholders == nil {
		return
	}
	s.placeholders.SetAliases(aliases)
	if err := s.placeholders.Update(refs, s.store.Snapshot()); err != nil {
		s.logger.Error("placeholder files could not be updated; the tripwire uses the new placeholders", slog.String(telemetry.KeyError, err.Error()))
	}
}
