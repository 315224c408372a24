package remote

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"
)

// Prompt asks the user for secrets while connecting: a key's passphrase and
// keyboard-interactive challenges (passwords, one-time codes).
type Prompt interface {
	// Passphrase asks for the passphrase of the named identity file.
	Passphrase(keyFile string) ([]byte, error)
	// Challenge answers one keyboard-interactive round for user@host:port.
	// echo[i] says whether the answer to questions[i] may be shown.
	Challenge(dest, name, instruction string, questions []string, echo []bool) ([]string, error)
}

// ErrNoTerminal is matched by a prompt that was needed without a terminal.
var ErrNoTerminal = errors.New("needs a terminal")

// TerminalPrompt asks on the terminal: questions go to Out (default stderr),
// answers come from In (default stdin), which must be a terminal. Without a
// terminal every question fails with an error matching ErrNoTerminal.
type TerminalPrompt struct {
	In  *os.File
	Out io.Writer
}

var promptMu sync.Mutex // one question on the terminal at a time

func (p TerminalPrompt) files() (*os.File, io.Writer) {
	in, out := p.In, p.Out
	if in == nil {
		in = os.Stdin
	}
	if out == nil {
		out = os.Stderr
	}
	return in, out
}

func (p TerminalPrompt) noTerminal(what string) error {
	return fmt.Errorf("%w for %s (stdin is not a terminal)", ErrNoTerminal, what)
}

// Passphrase reads the passphrase without echo.
func (p TerminalPrompt) Passphrase(keyFile string) ([]byte, error) {
	in, out := p.files()
	if !term.IsTerminal(int(in.Fd())) {
		return nil, fmt.Errorf("%w; load the key into ssh-agent (ssh-add %s) or use a key without a passphrase",
			p.noTerminal("the passphrase of "+keyFile), keyFile)
	}
	promptMu.Lock()
	defer promptMu.Unlock()
	fmt.Fprintf(out, "Enter passphrase for key '%s': ", keyFile)
	b, err := term.ReadPassword(int(in.Fd()))
	fmt.Fprintln(out)
	if err != nil {
		return nil, fmt.Errorf("remote: reading passphrase: %w", err)
	}
	return b, nil
}

// Challenge prints the instruction and asks each question, echoing the
// answer only when the server allows it.
func (p TerminalPrompt) Challenge(dest, name, instruction string, questions []string, echo []bool) ([]string, error) {
	if len(questions) == 0 {
		if instruction != "" {
			_, out := p.files()
			fmt.Fprintln(out, instruction)
		}
		return []string{}, nil
	}
	in, out := p.files()
	if !term.IsTerminal(int(in.Fd())) {
		return nil, p.noTerminal(fmt.Sprintf("keyboard-interactive authentication to %s (%s)", dest, strings.TrimSpace(questions[0])))
	}
	promptMu.Lock()
	defer promptMu.Unlock()
	if name != "" {
		fmt.Fprintln(out, name)
	}
	if instruction != "" {
		fmt.Fprintln(out, instruction)
	}
	answers := make([]string, len(questions))
	for i, q := range questions {
		fmt.Fprint(out, q)
		if i < len(echo) && echo[i] {
			line, err := bufio.NewReader(in).ReadString('\n')
			if err != nil {
				return nil, fmt.Errorf("remote: reading answer: %w", err)
			}
			answers[i] = strings.TrimRight(line, "\r\n")
			continue
		}
		b, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(out)
		if err != nil {
			return nil, fmt.Errorf("remote: reading answer: %w", err)
		}
		answers[i] = string(b)
	}
	return answers, nil
}
