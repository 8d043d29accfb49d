package proc

// The signals this package's tests send reach the processes they start,
// whatever dispositions the test binary inherited.
import _ "github.com/fence-dev/fence/internal/testsig"
