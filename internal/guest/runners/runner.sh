# cellbox Bash kernel runner: one interactive bash for the guest, its state (folder,
# variables, functions) carried from cell to cell.
#
# The guest starts `bash --noprofile --norc --noediting +m -i` with this script in
# CELLBOX_RUNNER and writes one line a message to its standard input, which is the shell's
# command input (never a cell's: a cell reads /dev/null):
#   eval "$CELLBOX_RUNNER"; unset CELLBOX_RUNNER    the first line: loads this script
#   __cellbox_cell QUIET $'code' [$'NAME' $'value']...   runs a cell, with NAMEs exported for it
# and reads its answers on descriptor 4, one JSON message a line:
#   {"t":"started","n":N}   the cell runs; SIGINT now interrupts it
#   {"t":"out","o":{...}}   the error output of a cell whose last command failed
#   {"t":"done","ok":bool,"n":N}
# An interactive shell is what makes an interrupt work as it does in a terminal: SIGINT
# (sent to the process group) stops the running command and the rest of the cell, and the
# shell reads its next line. PROMPT_COMMAND, run before each prompt, reports a line's end.
PS1='' PS2='' PS4='+ '
unset HISTFILE
set +o history
__cellbox_n=0
__cellbox_cell() {
	(($1)) || __cellbox_n=$((__cellbox_n + 1))
	printf '{"t":"started","n":%d}\n' "$__cellbox_n" >&4
	local __cellbox_code=$2
	shift 2
	while (($# >= 2)); do
		local -x "$1=$2"
		shift 2
	done
	eval "$__cellbox_code" </dev/null 3<&- 4>&-
}
__cellbox_done() {
	if (($1)); then
		printf '{"t":"out","o":{"type":"error","ename":"ExitStatus","evalue":"%d","traceback":["the last command exited with status %d"]}}\n' "$1" "$1" >&4
		printf '{"t":"done","ok":false,"ename":"ExitStatus","n":%d}\n' "$__cellbox_n" >&4
	else
		printf '{"t":"done","ok":true,"n":%d}\n' "$__cellbox_n" >&4
	fi
}
PROMPT_COMMAND='__cellbox_done $?'
