use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report", name = "other", lock_at_most_for = "10m")]
async fn report(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
