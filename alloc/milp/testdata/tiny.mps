NAME          BFTRAIN
ROWS
 N  OBJ
 L  P0
 L  P1
 L  P2
 L  Q0
 G  Q1
 G  Q2
 L  Q3
 L  Q4
 G  Q5
 G  Q6
 L  Q7
 L  Q8
 G  Q9
 G  Qa
 L  Qb
 L  Qc
 G  Qd
 G  Qe
 L  Qf
 L  Qg
 G  Qh
 G  Qi
 L  Qj
 L  Qk
 G  Ql
 G  Qm
 L  Qn
 E  C0
 G  R0
 L  R1
 L  R2
 L  R3
 G  T0
 L  T1
 L  F0
 G  F1
 L  F2
 G  F3
 E  V0
 E  I0
 E  O0
 E  E0
 L  H0
 L  H1
 L  H2
 E  C1
 G  R4
 L  R5
 L  R6
 L  R7
 G  T2
 L  T3
 L  F4
 G  F5
 L  F6
 G  F7
 E  V1
 E  I1
 E  O1
 E  E1
 L  H3
 L  H4
 L  H5
COLUMNS
    MARKER    'MARKER'                 'INTORG'
    X0        P0                   1   Q0                  -1
    X0        Q1                  -1   Q2                   1
    X0        Q3                   1   C0                  -1
    X1        P1                   1   Q4                  -1
    X1        Q5                  -1   Q6                   1
    X1        Q7                   1   C0                  -1
    X2        P2                   1   Q8                  -1
    X2        Q9                  -1   Qa                   1
    X2        Qb                   1   C0                  -1
    X3        P0                   1   Qc                  -1
    X3        Qd                  -1   Qe                   1
    X3        Qf                   1   C1                  -1
    X4        P1                   1   Qg                  -1
    X4        Qh                  -1   Qi                   1
    X4        Qj                   1   C1                  -1
    X5        P2                   1   Qk                  -1
    X5        Ql                  -1   Qm                   1
    X5        Qn                   1   C1                  -1
    D0        Q0                   1   Q1                   1
    D0        Q2                   1   Q3                   1
    D0        T0                  -1   T1                   1
    D1        Q4                   1   Q5                   1
    D1        Q6                   1   Q7                   1
    D1        T0                  -1   T1                   1
    D2        Q8                   1   Q9                   1
    D2        Qa                   1   Qb                   1
    D2        T0                  -1   T1                   1
    D3        Qc                   1   Qd                   1
    D3        Qe                   1   Qf                   1
    D3        T2                  -1   T3                   1
    D4        Qg                   1   Qh                   1
    D4        Qi                   1   Qj                   1
    D4        T2                  -1   T3                   1
    D5        Qk                   1   Ql                   1
    D5        Qm                   1   Qn                   1
    D5        T2                  -1   T3                   1
    A0        R0                   7   R1                   7
    B0        R2                  -7   R3                   7
    M0        T0                   7   T1                   7
    U0        OBJ                 50   F0                  -6
    U0        F1                  -2
    W0        OBJ                 25   F2                   7
    W0        F3                   1
    N0        C0                   1   R0                   1
    N0        R1                   1   R2                   1
    N0        R3                   1   T0                   1
    N0        T1                   1   F0                   1
    N0        F1                   1   F2                   1
    N0        F3                   1   I0                   1
    Y0        E0                   1   H0                  -1
    Y0        H1                  -1
    Y1        E0                   1   H1                  -1
    Y1        H2                  -1
    A1        R4                   7   R5                   7
    B1        R6                  -7   R7                   7
    M1        T2                   7   T3                   7
    U1        F4                  -6   F5                  -2
    W1        F6                   7   F7                   1
    N1        C1                   1   R4                   1
    N1        R5                   1   R6                   1
    N1        R7                   1   T2                   1
    N1        T3                   1   F4                   1
    N1        F5                   1   F6                   1
    N1        F7                   1   I1                   1
    Y2        E1                   1   H3                  -1
    Y2        H4                  -1
    Y3        E1                   1   H4                  -1
    Y3        H5                  -1
    MARKER    'MARKER'                 'INTEND'
    S0        OBJ                -10   O0                  -1
    L0        V0                   1   H0                   1
    L1        V0                   1   I0                  -1
    L1        O0                  10   H1                   1
    L2        V0                   1   I0                  -2
    L2        O0                15.5   H2                   1
    S1        OBJ                -20   O1                  -1
    L3        V1                   1   H3                   1
    L4        V1                   1   I1                  -1
    L4        O1                   4   H4                   1
    L5        V1                   1   I1                  -3
    L5        O1                   9   H5                   1
RHS
    RHS       P0                   1   P1                   1
    RHS       P2                   1   Q3                   2
    RHS       Q4                   1   Q5                  -1
    RHS       Q6                   1   Q7                   1
    RHS       Qb                   2   Qf                   2
    RHS       Qj                   2   Qk                   1
    RHS       Ql                  -1   Qm                   1
    RHS       Qn                   1   R0                   1
    RHS       R1                   7   R2                   2
    RHS       R3                   7   T0                   1
    RHS       T1                   8   F0                   1
    RHS       F2                   7   F3                   1
    RHS       V0                   1   E0                   1
    RHS       R4                   2   R5                   7
    RHS       R6                   3   R7                   7
    RHS       T2                   1   T3                   8
    RHS       F4                   1   F6                   7
    RHS       F7                   1   V1                   1
    RHS       E1                   1
BOUNDS
 UP BND       X0                   1
 UP BND       X1                   1
 UP BND       X2                   1
 UP BND       X3                   1
 UP BND       X4                   1
 UP BND       X5                   1
 UP BND       D0                   1
 UP BND       D1                   1
 UP BND       D2                   1
 UP BND       D3                   1
 UP BND       D4                   1
 UP BND       D5                   1
 UP BND       A0                   1
 UP BND       B0                   1
 UP BND       M0                   1
 UP BND       U0                   1
 UP BND       W0                   1
 UP BND       N0                   3
 UP BND       Y0                   1
 UP BND       Y1                   1
 UP BND       A1                   1
 UP BND       B1                   1
 UP BND       M1                   1
 UP BND       U1                   1
 UP BND       W1                   1
 UP BND       N1                   3
 UP BND       Y2                   1
 UP BND       Y3                   1
 FR BND       S0
 UP BND       L0                   1
 UP BND       L1                   1
 UP BND       L2                   1
 FR BND       S1
 UP BND       L3                   1
 UP BND       L4                   1
 UP BND       L5                   1
ENDATA
