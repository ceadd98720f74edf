use shedlock_macros::scheduler_lock;

#[scheduler_lock(lock_at_most_for = "PT", lock_at_least_for = "5x")]
async fn report(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
