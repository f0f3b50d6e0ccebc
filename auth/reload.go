package auth

import (
	"errors"
	"sync/atomic"
)

// Reloadable is a Verifier whose underlying Verifier is rebuilt by Reload
// (SIGHUP, CONTRACT.md section 11.3). Verify always uses a complete
// verifier: the old one until the new one has loaded.
type Reloadable struct {
	load func() (Verifier, error) // immutable after NewReloadable
	cur  atomic.Pointer[holder]   // atomic
}

type holder struct{ v Verifier }

// NewReloadable calls load once and returns a Reloadable serving its result;
// Reload calls load again. For example:
//
//	r, err := auth.NewReloadable(func() (auth.Verifier, error) { return auth.LoadTokens(path) })
func NewReloadable(load func() (Verifier, error)) (*Reloadable, error) {
	v, err := load()
	if err != nil {
		return nil, err
	}
	r := &Reloadable{load: load}
	r.cur.Store(&holder{v})
	return r, nil
}

// Reload rebuilds the verifier. When that fails, the previous verifier stays
// in use and the error is returned for the caller to log. Tokens verified
// before keep their identity. Safe for concurrent use with Verify and with
// itself (concurrent reloads each swap in a complete verifier).
//
// A reload that would replace a verifier that accepts some token with one
// that accepts none (a tokens file read while an editor or a script
// rewrote it in place: truncated, not yet written) is refused the same way:
// nobody gets locked out by a SIGHUP that came too early.
func (r *Reloadable) Reload() error {
	v, err := r.load()
	if err != nil {
		return err
	}
	if isEmpty(v) && !isEmpty(r.cur.Load().v) {
		return ErrReloadEmpty
	}
	r.cur.Store(&holder{v})
	return nil
}

// ErrReloadEmpty is Reload's error for a file that now holds no token.
var ErrReloadEmpty = errors.New("auth: the reloaded file holds no token: kept the previous ones (restart edge to remove every token)")

// isEmpty reports whether v says it accepts no token at all.
func isEmpty(v Verifier) bool {
	e, ok := v.(interface{ empty() bool })
	return ok && e.empty()
}

// Verify verifies with the current verifier. Safe for concurrent use.
func (r *Reloadable) Verify(token string) (Identity, error) {
	return r.cur.Load().v.Verify(token)
}

// Chain is a Verifier that accepts a token any of its members accepts, in
// order (static tokens and JWTs both configured). Immutable once built.
type Chain []Verifier

// Verify returns the first member's identity that accepts the token. When
// none does, the error is the first that says more than "not my kind of
// token" (ErrUnknownToken, ErrMalformed, ErrMissing), else the first error.
// An empty token (the request carried none) is ErrMissing at once: no
// member is asked, so no key is parsed or verified for it (issue 20 item
// 5). Safe for concurrent use when its members are.
func (c Chain) Verify(token string) (Identity, error) {
	if token == "" {
		return Identity{}, ErrMissing
	}
	var first, telling error
	for _, v := range c {
		id, err := v.Verify(token)
		if err == nil {
			return id, nil
		}
		if first == nil {
			first = err
		}
		if telling == nil && !errors.Is(err, ErrUnknownToken) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrMissing) {
			telling = err
		}
	}
	switch {
	case telling != nil:
		return Identity{}, telling
	case first != nil:
		return Identity{}, first
	}
	return Identity{}, ErrInvalid
}

// Reload reloads every member that can (has a Reload() error method); a
// member that fails keeps its previous state. The result joins the errors.
// Safe for concurrent use when its members are.
func (c Chain) Reload() error {
	var errs []error
	for _, v := range c {
		if r, ok := v.(interface{ Reload() error }); ok {
			if err := r.Reload(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
