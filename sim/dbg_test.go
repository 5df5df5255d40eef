package sim_test
import ("testing";"context";"fmt";"os";"path/filepath"
 "github.com/bftrainer/bftrainer/sim";"github.com/bftrainer/bftrainer/alloc";"github.com/bftrainer/bftrainer/pool")
func TestDbgHps(t *testing.T){
 d:="/work/shared/data"
 summit,_:=sim.OpenTrace(filepath.Join(d,"summit/summit-trace-events.csv.gz"),filepath.Join(d,"summit/summit-trace-nodes.csv"))
 f,_:=os.Open(filepath.Join(d,"workloads/jobs-hps-shufflenet-10J.csv"))
 jobs,_:=sim.ReadWorkload(f)
 fmt.Printf("%+v\n", jobs[0])
 for _,m:=range []pool.CurveMode{"given","learned"}{
 res,err:=sim.Replay(context.Background(),summit.Window(sim.StartEvent(summit,jobs)),jobs,sim.Options{Solver:alloc.Adaptive{},Curves:m})
 if err!=nil{t.Fatal(err)}
 s:=res.Summary
 fmt.Printf("%s makespan %.2f resc %d fin %d err %d %s\n",m,s.MakespanH,s.Rescales,s.Finished,s.SolverErrors,s.FirstSolverError)
 for _,tr:=range res.Trainers[:3]{fmt.Printf("  %+v\n",tr)}
 }
}
