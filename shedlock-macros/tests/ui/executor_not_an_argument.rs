use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report", lock_at_most_for = "10m", executor = jobs)]
async fn report(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
