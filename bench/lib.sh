# Sourced by the bench scripts (from the project root): what they all need.

# Waits until something accepts connections on 127.0.0.1:$1 (10 s at most).
wait_for_port() {
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}
