package asks

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Summary is the answer in a few words, as the CLI prints it.
func (a Answer) Summary() string {
	switch {
	case a.Allow && a.Scope == Run:
		return "allowed for this run"
	case a.Allow && a.Scope == Always:
		return "allowed, and by a rule from now on"
	case a.Rule != "":
		return "denied, and by a rule from now on"
	case a.Allow:
		return "allowed once"
	}
	return "denied"
}

// Target is what k asks about: METHOD host:port/path.
func (k Ask) Target() string {
	return fmt.Sprintf("%s %s:%d%s", k.Method, k.Host, k.Port, k.Path)
}

// WriteTable writes list as `vak gateway asks` shows it (how long each
// waits from now).
func WriteTable(w io.Writer, list []Ask, now time.Time) error {
	if len(list) == 0 {
		fmt.Fprintln(w, "no request is waiting for an answer")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWAITING\tGIVES UP IN\tREQUEST")
	for _, k := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k.ID, k.Count, k.Expires.Sub(now).Round(time.Second), k.Target())
	}
	return tw.Flush()
}

// WriteEvent writes e as `vak gateway asks --follow` shows it.
func WriteEvent(w io.Writer, e Event) error {
	var err error
	switch e.Kind {
	case "answered":
		a := Answer{}
		if e.Answer != nil {
			a = *e.Answer
		}
		_, err = fmt.Fprintf(w, "answered %s: %s (%s): %s\n", e.Ask.ID, a.Summary(), a.By, e.Ask.Target())
	case "expired":
		_, err = fmt.Fprintf(w, "expired  %s: nobody answered: %s\n", e.Ask.ID, e.Ask.Target())
	default:
		_, err = fmt.Fprintf(w, "ask      %s: %s (%d waiting; vak gateway allow %s)\n", e.Ask.ID, e.Ask.Target(), e.Ask.Count, e.Ask.ID)
	}
	return err
}
