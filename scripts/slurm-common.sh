# Shell helpers and slurm.conf settings shared by scripts/slurm-up.sh (one host) and
# scripts/cluster-up.sh (several nodes in namespaces), which source this file. The helpers use
# the sourcing script's `say` and `elapsed`; each slurm_conf_* function prints a block of lines.
# The settings are the ones measured when the one-host cluster was built (see the comments in
# slurm-up.sh): root runs the daemons, munge authenticates, multifactor priority with every
# weight 0 (the market's priority= values alone decide the order), no Slurm-native preemption
# (the market suspends and resumes).

slurm_conf_daemons() {
    cat <<'CONF'
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# step-credential lifetime; also the delay before a requeued job may restart (default 120 s)
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
CONF
}

slurm_conf_scheduling() {
    cat <<'CONF'
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/none
# admin-set priorities (scontrol update priority=) decide the order
PriorityType=priority/multifactor
PriorityWeightAge=0
PriorityWeightFairshare=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
CONF
}

alive() {  # alive PIDFILE: the pid in the file is a live process
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND every 0.1 s (the caller's say reports)
    local secs=$1 what=$2; shift 2
    local end=$(( $(date +%s) + secs ))
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.1
    done
    say "$what ($(elapsed) s)"
}
