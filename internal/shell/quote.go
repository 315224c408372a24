// Package shell quotes words for POSIX shells (bash on the cluster, sh -c
// behind sshd). Everything that reaches a shell goes through Quote or Join.
package shell

import "strings"

// Quote returns s as one shell word. Words made only of characters that no
// shell treats specially are returned as they are; anything else is wrapped
// in single quotes, each embedded single quote closed, escaped and reopened.
// Inside single quotes $(…), backticks, $VAR and globs are inert.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if isPlain(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join quotes each word and joins them with single spaces.
func Join(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}

func isPlain(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("@%+=:,./_-", r):
		default:
			return false
		}
	}
	return true
}

// IsName reports whether s is a valid shell variable name:
// [A-Za-z_][A-Za-z0-9_]*.
func IsName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
