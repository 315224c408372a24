package labtest

// ExitStandIn is a stand-in stage payload (a bash script body, without its
// #! line) that ends as the file "status" beside it says: "exit N" exits
// with N; "kill SIG" kills itself with SIG, its handler reset first (bash
// starts background commands with INT and QUIT ignored). The exit-status
// tests (templates' TestScriptExitStatuses, rules' TestLabExitStatusTable)
// run the rendered scripts with it.
const ExitStandIn = `how=$(cat "$(dirname "$0")/status")
case $how in
  exit\ *) exit "${how#exit }" ;;
  kill\ *) exec /usr/bin/perl -e '$SIG{$ARGV[0]} = "DEFAULT"; kill $ARGV[0], $$; sleep 5; exit 3' "${how#kill }" ;;
esac
exit 3
`
