package rpc

import (
	"fmt"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// surrogateIDs are string id tokens that decode to lone UTF-16 surrogates,
// U+FFFD and their neighbours, each spelled as JSON text.
var surrogateIDs = []string{
	`"\ud800"`,       // lone high surrogate
	`"\udfff"`,       // lone low surrogate
	`"\ufffd"`,       // U+FFFD, escaped
	"\"\uFFFD\"",     // U+FFFD, raw UTF-8 bytes EF BF BD
	`"\ud800\udc00"`, // a valid pair: U+10000
	"\"\U00010000\"", // U+10000, raw UTF-8
	`"\udc00\ud800"`, // low then high: two lone surrogates, not a pair
	`"\ufffd\ufffd"`, // what the two lone surrogates above used to decode to
	`"x\ud800y"`,     // a lone surrogate between other characters
	`"x\ufffdy"`,
	`"a"`,
	`"\u0061"`, // the same id as "a" (CONTRACT.md section 2)
}

// utf16Units is the reference identity of a string id token: the sequence of
// UTF-16 code units its JSON text denotes, lone surrogates included. Two
// string ids are the same id exactly when these are equal.
func utf16Units(tok string) []uint16 {
	in := tok[1 : len(tok)-1]
	var u []uint16
	for i := 0; i < len(in); {
		if in[i] != '\\' {
			r, n := utf8.DecodeRuneInString(in[i:])
			u = utf16.AppendRune(u, r)
			i += n
			continue
		}
		if in[i+1] != 'u' {
			panic("utf16Units: only \\u escapes in these tests")
		}
		var v uint16
		if _, err := fmt.Sscanf(in[i+2:i+6], "%04x", &v); err != nil {
			panic(err)
		}
		u = append(u, v)
		i += 6
	}
	return u
}

func sameUnits(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoneSurrogateIDsAreDistinct is the regression test for string ids that
// differ only in lone surrogate escapes colliding. The id key decoded every
// lone surrogate escape to U+FFFD (as encoding/json does), so "\ud800",
// "\udfff", "\ufffd" and a raw U+FFFD were one id: with one of them in
// flight, a request with another got DUPLICATE_REQUEST_ID, and a
// $/cancelRequest naming one cancelled the other. Different JSON strings are
// different ids; escapes of the same string ("a", "\u0061") stay one id
// (CONTRACT.md sections 2, 3.1, 4). For every ordered pair (A, B), with A held
// in the backend: a request with id B is admitted unless B is the same id
// ("duplicate"), and a $/cancelRequest for B cancels A only if it is the same
// id ("cancel").
func TestLoneSurrogateIDsAreDistinct(t *testing.T) {
	for _, a := range surrogateIDs {
		for _, b := range surrogateIDs {
			if a == b {
				continue
			}
			same := sameUnits(utf16Units(a), utf16Units(b))
			t.Run(fmt.Sprintf("duplicate %s %s", a, b), func(t *testing.T) {
				if same {
					runScript(t, opts{},
						send(get(a)), backendBlock("a"),
						send(get(b)), expectReply(duplicateReply(b)),
						expectStats(1, 1),
						backendRelease("a", `"A"`),
						applyCompletions(),
						expectReply(resultReply(a, `"A"`)),
					)
					return
				}
				runScript(t, opts{},
					send(get(a)), backendBlock("a"),
					send(get(b)), backendBlock("b"),
					expectStats(2, 2),
					backendRelease("b", `"B"`),
					applyCompletions(),
					expectReply(resultReply(b, `"B"`)),
					backendRelease("a", `"A"`),
					applyCompletions(),
					expectReply(resultReply(a, `"A"`)),
				)
			})
			t.Run(fmt.Sprintf("cancel %s %s", a, b), func(t *testing.T) {
				if same {
					runScript(t, opts{},
						send(get(a)), backendBlock("a"),
						cancel(b),
						expectCtxCancelled("a", true),
						expectStats(0, 1),
						backendReturnOnCancel("a"),
						applyCompletions(),
						expectStats(0, 0),
					)
					return
				}
				runScript(t, opts{},
					send(get(a)), backendBlock("a"),
					cancel(b),
					expectCtxCancelled("a", false),
					expectStats(1, 1),
					backendRelease("a", `"A"`),
					applyCompletions(),
					expectReply(resultReply(a, `"A"`)),
				)
			})
		}
	}
}
