use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report", lock_at_most_for = "10m", lock_at_least_for = "1h")]
async fn report(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
