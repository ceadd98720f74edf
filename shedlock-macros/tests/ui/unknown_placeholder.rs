use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report-{regin}", lock_at_most_for = "10m")]
async fn report(executor: &shedlock::LockingTaskExecutor, region: &str) {}

fn main() {}
