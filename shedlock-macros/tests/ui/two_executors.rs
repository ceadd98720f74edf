use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report", lock_at_most_for = "10m")]
async fn report(primary: &shedlock::LockingTaskExecutor, secondary: &shedlock::LockingTaskExecutor) {}

fn main() {}
