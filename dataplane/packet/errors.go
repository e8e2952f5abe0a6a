package packet

// Error is why a packet failed to parse. It converts to error without allocating, and its value
// is a dense index suitable for counter arrays (see NumErrors).
type Error uint8

const (
	_ Error = iota
	// ErrTruncated: the buffer ends before the header (or the length it declares) does.
	ErrTruncated
	// ErrVersion: the IP version field does not match the header being parsed.
	ErrVersion
	// ErrHeaderLength: a header length field is below the minimum or beyond the packet.
	ErrHeaderLength
	// ErrChecksum: the IPv4 header checksum does not verify.
	ErrChecksum
	// ErrUnsupported: a well-formed header of a kind the dataplane does not handle.
	ErrUnsupported
	// ErrFlags: reserved or required flag bits are wrong (VXLAN I flag, Geneve version, ...).
	ErrFlags

	// NumErrors is one more than the largest Error, for sizing counter arrays.
	NumErrors
)

var errorText = [NumErrors]string{
	ErrTruncated:    "truncated",
	ErrVersion:      "wrong IP version",
	ErrHeaderLength: "bad header length",
	ErrChecksum:     "bad IPv4 header checksum",
	ErrUnsupported:  "unsupported",
	ErrFlags:        "bad flags",
}

func (e Error) Error() string {
	if e < NumErrors && errorText[e] != "" {
		return "packet: " + errorText[e]
	}
	return "packet: unknown error"
}
