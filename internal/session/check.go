package session

import (
	"errors"
	"fmt"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Request checks: what a request asks is checked, and the server's defaults filled in,
// before any of it is admitted (admission.go).

// defaults are the limits a session gets when it asks for nothing.
func (m *Manager) defaults() api.Limits {
	return api.Limits{MemoryMB: m.cfg.MemoryMB, CPUs: m.cfg.CPUs, Pids: m.cfg.Pids, DiskMB: m.cfg.DiskMB}
}

// limits resolves requested limits against the defaults and the server's maxima.
func (m *Manager) limits(req *api.Limits) (api.Limits, error) {
	l := m.defaults()
	if req == nil {
		return l, nil
	}
	var errs []error
	set := func(name string, v, max float64, dst func()) {
		switch {
		case v < 0:
			errs = append(errs, fmt.Errorf("limits.%s must not be negative", name))
		case v > max:
			errs = append(errs, fmt.Errorf("limits.%s %v is above this server's maximum %v", name, v, max))
		case v > 0:
			dst()
		}
	}
	set("memory_mb", float64(req.MemoryMB), float64(m.cfg.MaxMemoryMB), func() { l.MemoryMB = req.MemoryMB })
	set("cpus", req.CPUs, m.cfg.MaxCPUs, func() { l.CPUs = req.CPUs })
	set("pids", float64(req.Pids), float64(m.cfg.MaxPids), func() { l.Pids = req.Pids })
	set("disk_mb", float64(req.DiskMB), float64(m.cfg.MaxDiskMB), func() { l.DiskMB = req.DiskMB })
	if req.MemoryMB > 0 && req.MemoryMB < 64 {
		errs = append(errs, errors.New("limits.memory_mb must be at least 64: a Python kernel needs it"))
	}
	if req.Pids > 0 && req.Pids < 16 {
		errs = append(errs, errors.New("limits.pids must be at least 16"))
	}
	if err := errors.Join(errs...); err != nil {
		return l, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return l, nil
}

const (
	maxEnvVars  = 256
	maxEnvBytes = 64 << 10
)

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return fmt.Errorf("env has %d variables; at most %d: %w", len(env), maxEnvVars, errdefs.ErrInvalidArgument)
	}
	n := 0
	for k, v := range env {
		n += len(k) + len(v)
		if !validEnvName(k) {
			return fmt.Errorf("env name %q is not valid: use letters, digits and _, not starting with a digit: %w", k, errdefs.ErrInvalidArgument)
		}
		for _, c := range v {
			if c == 0 {
				return fmt.Errorf("env %s contains a NUL byte: %w", k, errdefs.ErrInvalidArgument)
			}
		}
	}
	if n > maxEnvBytes {
		return fmt.Errorf("env is %d bytes; at most %d: %w", n, maxEnvBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

func validEnvName(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	for i, c := range k {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckLanguage returns the language lang names (an api.Language* constant; "" is Python),
// or an error that lists the languages.
func CheckLanguage(lang string) (string, error) {
	if l, ok := api.LanguageOf(lang); ok {
		return l, nil
	}
	return "", fmt.Errorf("language %.100q is not supported; use one of \"python\", \"javascript\" (\"js\"), \"typescript\" (\"ts\"), \"r\" or \"bash\": %w",
		lang, errdefs.ErrInvalidArgument)
}

// resolveImage returns the image a request's sandbox runs on: the one it names, or the
// server's default for "".
func (m *Manager) resolveImage(name string) (string, error) {
	switch {
	case name == "":
		return m.defaultImage, nil
	case m.defaultImage == "":
		return "", fmt.Errorf("image %.100q: this server runs sandboxes on the host's root filesystem; images need --rootfs image (runc) or --backend docker: %w",
			name, errdefs.ErrInvalidArgument)
	}
	return name, image.CheckName(name)
}

// checkSandbox checks what a request asks of its sandbox, Create's and OneShot's alike, and
// returns the language and the sandbox's spec: its image, and its limits with the server's
// defaults filled in.
func (m *Manager) checkSandbox(language, img string, req *api.Limits, env map[string]string) (string, boxSpec, error) {
	lang, err := CheckLanguage(language)
	if err != nil {
		return "", boxSpec{}, err
	}
	if img, err = m.resolveImage(img); err != nil {
		return "", boxSpec{}, err
	}
	limits, err := m.limits(req)
	if err != nil {
		return "", boxSpec{}, err
	}
	return lang, boxSpec{image: img, limits: limits, env: env}, checkEnv(env)
}

func (m *Manager) timeout(t float64) (float64, error) {
	switch {
	case t < 0:
		return 0, fmt.Errorf("timeout_s must not be negative: %w", errdefs.ErrInvalidArgument)
	case t == 0:
		return m.cfg.ExecTimeout.Seconds(), nil
	case t > m.cfg.MaxExecTimeout.Seconds():
		return 0, fmt.Errorf("timeout_s %v is above this server's maximum %v: %w", t, m.cfg.MaxExecTimeout.Seconds(), errdefs.ErrInvalidArgument)
	}
	return t, nil
}

func checkCommand(req *api.CommandRequest) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return fmt.Errorf("cmd must name a program, e.g. [\"ls\", \"-l\"]: %w", errdefs.ErrInvalidArgument)
	}
	for _, a := range req.Cmd {
		for _, c := range a {
			if c == 0 {
				return fmt.Errorf("cmd arguments must not contain NUL bytes: %w", errdefs.ErrInvalidArgument)
			}
		}
	}
	if req.Cwd != "" {
		if _, err := workspace.Clean(req.Cwd); err != nil {
			return fmt.Errorf("cwd: %w", err)
		}
	}
	return checkEnv(req.Env)
}
