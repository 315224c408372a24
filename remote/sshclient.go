package remote

import (
	"io"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// sshClient is what conn needs from an SSH connection; sshSession is what
// Run needs from a session. Small, so tests can stand in for the network.
type sshClient interface {
	NewSession() (sshSession, error)
	NewSFTP() (*sftp.Client, error)
	SendKeepalive() error
	Wait() error
	Close() error
}

type sshSession interface {
	SetOutput(stdout, stderr io.Writer)
	StdinPipe() (io.WriteCloser, error)
	Start(cmd string) error
	Wait() error
	Signal(sig ssh.Signal) error
	Close() error
}

// xClient adapts *ssh.Client.
type xClient struct{ *ssh.Client }

func (x xClient) NewSession() (sshSession, error) {
	s, err := x.Client.NewSession()
	if err != nil {
		return nil, err
	}
	return xSession{s}, nil
}

func (x xClient) NewSFTP() (*sftp.Client, error) { return sftp.NewClient(x.Client) }

func (x xClient) SendKeepalive() error {
	_, _, err := x.Client.SendRequest("keepalive@openssh.com", true, nil)
	return err
}

type xSession struct{ *ssh.Session }

func (x xSession) SetOutput(stdout, stderr io.Writer) {
	x.Session.Stdout = stdout
	x.Session.Stderr = stderr
}
