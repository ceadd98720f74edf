use shedlock_macros::scheduler_lock;

#[scheduler_lock(name = "report")]
async fn report(executor: &shedlock::LockingTaskExecutor) {}

fn main() {}
